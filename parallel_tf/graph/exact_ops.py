"""The ops a portable run may execute (--kernels=portable), as an allow-list of op types, checked against the
graphs TensorFlow runs: after its graph optimizer (Grappler), which rewrites ops into others (`x / sqrt(y)` into
`x * Rsqrt(y)`), so a check of the graph Python built would miss what runs.

Portable bits are a property of every op a step runs, not only of its products. An op is on the list when its
bits follow its inputs alone on every x86-64 CPU with AVX2:
- EXACT: IEEE arithmetic, one correctly rounded operation an element (add, multiply, divide, sqrt, compare,
  select, casts), and ops that only move, copy, store or order values;
- OURS: this package's own kernels (graph/portable_kernel.py), whose sums run in one order, term 0 first;
- THIS_BUILD: Eigen's code in TensorFlow's wheel, compiled once for AVX without FMA and free of approximate
  instructions, its reductions split by the pinned thread count only: the same on every such CPU, though a
  TensorFlow version's build may differ from another's (exp, log, long sums).
Off the list, whatever the graph: the approximate instructions (RSQRTPS, RCPPS, in Eigen's rsqrt and reciprocal
on vectors of 8 or more), whose bits differ between Intel and AMD (xsimd #757, #790) and which QEMU computes
exactly, and TensorFlow's own products, whose order of summation follows the CPU's caches and vendor. An op the
list does not know is refused too, naming it and the node it runs as: a new op is judged before it is trusted.

Two rewrites of Grappler's bring such ops in: its arithmetic optimizer turns x / sqrt(y) into x * Rsqrt(y), and is
off in a portable run's sessions (training/devices.py); its constant folding turns 1 / y into Reciprocal(y), so a
quotient whose numerator may be 1 is written `quotient(x, y)`. Constant folding stays on, and with it x / c by a
constant c is computed as x * fl(1/c), a product with the rounded reciprocal: 1 ulp off the quotient in about a
third of the elements for c = 3 (docs/reproducibility.md), the same on every machine.
"""

from parallel_tf.compat import tf

EXACT = frozenset(
    {
        # elementwise IEEE arithmetic: one rounding an element
        *("Add", "AddV2", "AddN", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Xdivy", "Neg", "Abs", "Square"),
        *("SquaredDifference", "Maximum", "Minimum", "Sqrt", "SqrtGrad", "Floor", "Ceil", "Round", "Rint", "Sign"),
        *("LeftShift", "RightShift", "BitwiseAnd", "BitwiseOr"),  # integers: exp's 2^n (exact_math.py)
        *("FloorDiv", "FloorMod", "Mod", "BiasAdd", "Relu", "ReluGrad", "ClipByValue", "IsFinite", "Range"),
        # comparisons, logic, selection, casts
        *("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr"),
        *("LogicalNot", "Select", "SelectV2", "Cast", "Bitcast", "ArgMax", "ArgMin", "OnesLike", "ZerosLike"),
        # values moved, copied or made: no arithmetic on them
        *("Const", "HostConst", "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient"),
        *("Placeholder", "PlaceholderWithDefault", "_Arg", "_Retval", "_Send", "_Recv", "_HostSend", "_HostRecv"),
        *("Reshape", "ExpandDims", "Squeeze", "Transpose", "ConcatV2", "Concat", "ConcatOffset", "Pack", "Unpack"),
        *("Slice", "StridedSlice", "StridedSliceGrad", "Split", "SplitV", "Gather", "GatherV2", "GatherNd"),
        *("Tile", "Fill", "Pad", "PadV2", "MirrorPad", "Reverse", "ReverseV2", "BroadcastTo", "BroadcastArgs"),
        *("BroadcastGradientArgs", "Shape", "ShapeN", "Size", "Rank", "DynamicStitch", "ParallelDynamicStitch"),
        *("OneHot", "InvertPermutation", "UnsortedSegmentSum", "Where", "TopKV2", "MaxPool", "MaxPoolGrad"),
        # random draws: counter-based generators, bits by their seeds alone
        *("RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "StatelessRandomUniform"),
        *("StatelessRandomUniformV2", "StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg"),
        # variables, their reads and plain writes, and the updates of IEEE operations an element
        *("VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "VarIsInitializedOp", "IsVariableInitialized"),
        *("Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"),
        *("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMax", "ResourceScatterUpdate", "ResourceScatterAdd"),
        "ScatterNd",  # duplicate indices summed one after another, in the order of the indices
        *("ApplyGradientDescent", "ResourceApplyGradientDescent", "ApplyMomentum", "ResourceApplyMomentum"),
        *("ApplyAdam", "ResourceApplyAdam", "ApplyAdagradV2", "ResourceApplyAdagradV2", "TemporaryVariable"),
        *("DestroyTemporaryVariable", "CountUpTo"),
        # control flow, ordering, queues, accumulators, collectives of sums in a fixed order, checkpoints
        *("MutexV2", "MutexLock", "ConsumeMutexLock"),  # tf.CriticalSection
        *("NoOp", "ControlTrigger", "Enter", "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "Switch"),
        *("RefSwitch", "NextIteration", "RefNextIteration", "LoopCond", "RefIdentity", "Assert", "CheckNumerics"),
        *("FIFOQueueV2", "PaddingFIFOQueueV2", "QueueEnqueueV2", "QueueEnqueueManyV2", "QueueDequeueV2"),
        *("QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueSizeV2", "QueueCloseV2", "QueueIsClosedV2"),
        *("ConditionalAccumulator", "AccumulatorApplyGradient", "AccumulatorTakeGradient"),
        *("AccumulatorNumAccumulated", "AccumulatorSetGlobalStep", "ResourceAccumulatorApplyGradient"),
        *("ResourceAccumulatorTakeGradient", "ResourceAccumulatorNumAccumulated"),
        *("ResourceAccumulatorSetGlobalStep", "ResourceConditionalAccumulator"),
        *("CollectiveReduce", "CollectiveReduceV2", "CollectiveGather", "CollectiveGatherV2"),
        *("CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2", "CollectiveBcastRecvV2"),
        *("SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "StringJoin"),
        *("Print", "PrintV2", "StringFormat", "Timestamp", "Sleep"),
    }
)

OURS = frozenset({"PortableMatMul", "PortableWindowsMatMul", "PortableMaxPoolGrad"})

THIS_BUILD = frozenset(
    {
        # Eigen's exp, log and tanh: polynomials of IEEE operations, no approximate instruction
        *("Exp", "Log", "Log1p", "Expm1", "Tanh", "TanhGrad", "Softmax", "LogSoftmax", "Cos", "Sin"),
        *("SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "Pow"),
        # Eigen's reductions: a tree of partial sums set by the shape, cut alike at 1, 2 and 3 threads (the recorded
        # runs: tests/test_portable_bits.py) but otherwise by TensorFlow 1.15 and 2.x (exact_math sums long rows)
        *("Sum", "Mean", "Prod", "Max", "Min", "All", "Any", "EuclideanNorm", "Cumsum"),
    }
)

ALLOWED = EXACT | OURS | THIS_BUILD

# Ops exact in float64 alone: TensorFlow 1.15 computes a float32 square root by RSQRTPS and a Newton step, so a
# portable step takes it in float64 (exact_math.sqrt). DT_DOUBLE's number in TensorFlow's types.proto.
IN_FLOAT64_ONLY = {"Sqrt", "SqrtGrad"}
DT_DOUBLE = 2

# The ops refused by name, and why: what a user who meets one should know.
REFUSED = {
    "Rsqrt": "Eigen's rsqrt runs RSQRTPS, an approximation whose bits differ between Intel and AMD",
    "RsqrtGrad": "the gradient of an approximate rsqrt",
    "Reciprocal": "Eigen's reciprocal runs RCPPS, an approximation whose bits differ between Intel and AMD",
    "Inv": "Eigen's reciprocal runs RCPPS, an approximation whose bits differ between Intel and AMD",
    "ApplyAdagrad": "TensorFlow's Adagrad update computes rsqrt by RSQRTPS",
    "ResourceApplyAdagrad": "TensorFlow's Adagrad update computes rsqrt by RSQRTPS",
    "Sqrt": "TensorFlow 1.15 computes a float32 square root by RSQRTPS and a Newton step; exact_math.sqrt takes it "
    "in float64, correctly rounded",
    "SqrtGrad": "the gradient of a float32 square root, which TensorFlow 1.15 computes by RSQRTPS",
    "BiasAddGrad": "TensorFlow's bias gradient cuts its sum in blocks by the thread count; graph/layers.py's "
    "add_bias sums it in order",
    "MatMul": "TensorFlow's own product, whose order of summation follows the CPU",
    "BatchMatMul": "TensorFlow's own product, whose order of summation follows the CPU",
    "BatchMatMulV2": "TensorFlow's own product, whose order of summation follows the CPU",
    "Conv2D": "TensorFlow's own convolution, whose order of summation follows the CPU",
    "Conv2DBackpropInput": "TensorFlow's own convolution, whose order of summation follows the CPU",
    "Conv2DBackpropFilter": "TensorFlow's own convolution, whose order of summation follows the CPU",
}


def quotient(x, y):
    """x / y, correctly rounded, for y != 0, as an op Grappler leaves as it is (DivNoNan: x / y, and 0 where y is
    0): where x is 1, constant folding would turn x / y into Reciprocal(y)."""
    return tf.math.divide_no_nan(x, y)


def nodes_of(graph_defs):
    """(node, its name) of every node of `graph_defs`, their function libraries' included."""
    for graph_def in graph_defs:
        for node in graph_def.node:
            yield node, node.name
        for function in graph_def.library.function:
            for node in function.node_def:
                yield node, f"{function.signature.name}/{node.name}"


def off_the_list(graph_defs):
    """{op type: the first node of it} of every op of `graph_defs` a portable run may not execute."""
    found: dict = {}
    for node, name in nodes_of(graph_defs):
        allowed = node.op in ALLOWED and (node.op not in IN_FLOAT64_ONLY or node.attr["T"].type == DT_DOUBLE)
        if not allowed:
            found.setdefault(node.op, name)
    return found


def why_not(op):
    return REFUSED.get(op, "an op the portable allow-list (graph/exact_ops.py) does not know")
