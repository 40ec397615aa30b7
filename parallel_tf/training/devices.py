"""A process's devices and the options of its sessions: the GPUs it sees, deterministic GPU kernels, and the
options every session and server of a task runs with. Where a graph's ops and variables live is
graph/placement.py's; what a run's CPU bits depend on, compat.py's."""

import os

from parallel_tf import compat
from parallel_tf.compat import tf


def visible_gpu_count():
    return len(tf.config.experimental.list_physical_devices("GPU"))


DETERMINISTIC_OPS = "TF_DETERMINISTIC_OPS"


def use_deterministic_gpu_kernels():
    """Asks TensorFlow for deterministic GPU kernels (cuDNN convolutions, bias and reduction gradients),
    unless the user set TF_DETERMINISTIC_OPS: without it, a worker pinned to a GPU computes with kernels
    whose summation order varies from run to run, and no bitwise promise would hold there. Set before the
    first session; TensorFlow reads it when it first builds a kernel. Returns the value in force."""
    return os.environ.setdefault(DETERMINISTIC_OPS, "1")


def server_config(cluster):
    """A task's server options: session_config's, and in a cluster of workers only (all-reduce) the worker
    that resolves who takes part in each collective (TensorFlow's group leader), the chief."""
    config = session_config()
    if not cluster.num_ps:
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    return config


def session_config(device_filters=None, operation_timeout_secs=0):
    """Session options every task uses: soft placement for ops without GPU kernels, GPU memory
    taken as needed, so workers sharing a GPU (more workers than GPUs) do not starve each other,
    and a deadline on every blocking op (0: none), so a dead peer is an error, not a hang. Idle
    threads sleep instead of spinning, where TensorFlow has the option (not 1.15): several tasks share
    a machine's cores, and a spinning thread of one takes them from the others. The intra-op threads
    are compat.py's pinned count (TensorFlow 1.15 sizes its pool from the first session's options)."""
    config = tf.ConfigProto(
        allow_soft_placement=True,
        device_filters=device_filters or [],
        operation_timeout_in_ms=int(operation_timeout_secs * 1000),
        intra_op_parallelism_threads=compat.intra_op_threads(),
    )
    config.gpu_options.allow_growth = True
    if compat.kernels() == "portable" or compat.tensorflow_1():
        # Grappler's arithmetic optimizer rewrites x / sqrt(y) into x * rsqrt(y), an approximate instruction whose
        # bits differ between Intel and AMD (graph/exact_ops.py), and reassociates sums (its hoisting and
        # aggregation stages), which a TensorFlow version may do otherwise than the next: a portable run computes
        # the arithmetic its graph says. Constant folding stays, and with it x / c computed as x * fl(1/c). On 1.x
        # it is off with TensorFlow's kernels too: there it broke the order of a pipelined sync step inside the loop
        # of steps (--num_ps=2 --pipeline_pieces=2: loss 0.785 against one server's 0.523 at 100 steps).
        rewrites = config.graph_options.rewrite_options
        rewrites.arithmetic_optimization = rewrites.OFF
    if "disable_thread_spinning" in config.experimental.DESCRIPTOR.fields_by_name:
        config.experimental.disable_thread_spinning = True
    return config
