"""Matrix products and convolutions whose bits do not depend on the CPU (--kernels=portable), or TensorFlow's own
(--kernels=fast).

A product's bits follow the order its sums are added in, and TensorFlow's CPU kernels let the machine choose it:
oneDNN's sgemm picks its code by the CPU's vendor and instruction set, and Eigen's own kernel (compiled once into
the wheel, AVX without FMA) reads how many terms it sums in one go off the L1 cache and whether to split a sum over
its threads off the L3 cache. So with --kernels=portable every product here is this package's own op,
PortableMatMul (graph/portable_kernel.py): each output summed over its terms in order, term 0 first, by fused
multiply-adds, the work split over threads by whole outputs only. Its bits follow the inputs alone, on every
x86-64 CPU with AVX2 and FMA, whatever its caches and thread count (tests/test_portable_bits.py: natively, under
every ONEDNN_MAX_CPU_ISA cap, and under QEMU's AMD and Intel models).

A convolution is a product too: each position's window of the (padded) image, as one row (its terms in the
kernel's order: row, column, channel), times the kernel as a matrix. Its gradients are the windows' product with
the gradient (the kernel's) and the windows of the padded gradient times the kernel turned half a circle (the
inputs'), each one PortableMatMul. --kernels=fast runs TensorFlow's own ops instead.
"""

import contextlib

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.graph import portable_kernel

_on_gpu = [False]  # whether the graph being built computes on a GPU (gpu_kernels)


@contextlib.contextmanager
def gpu_kernels(on_gpu):
    """While a worker's graph is built: where it computes on a GPU, its products are TensorFlow's own (with
    deterministic kernels: training/devices.py), whatever --kernels says, as a GPU never trains a CPU's bits."""
    before, _on_gpu[0] = _on_gpu[0], on_gpu
    try:
        yield
    finally:
        _on_gpu[0] = before


def tensorflows():
    """Whether the graph being built computes with TensorFlow's own kernels: --kernels=fast, or on a GPU."""
    return compat.kernels() == "fast" or _on_gpu[0]


def portable_kernel_chosen():
    """For summary.json's `kernels`: {"portable_kernel": "avx512f" or "avx2"}, the kernel the library chose on this
    CPU (the bits are the same), where the products are ours; {} with --kernels=fast."""
    return {} if compat.kernels() == "fast" else {"portable_kernel": portable_kernel.instruction_set()}


def matmul(a, b):
    """a [m, k] @ b [k, n], and its gradients."""
    return contract(a, b)


def contract(a, b, transpose_a=False, transpose_b=False):
    """op(a) @ op(b) for matrices, as tf.matmul's arguments say; portable: every sum in order."""
    if tensorflows():
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    return portable_kernel.ops().portable_mat_mul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def conv2d_same(inputs, kernel):
    """A stride-1 'SAME' convolution of NHWC `inputs` by `kernel` [k, k, c_in, c_out], and its gradients."""
    if tensorflows():
        return tf.nn.conv2d(inputs, kernel, [1, 1, 1, 1], "SAME")
    size, _, channels, filters = kernel.shape.as_list()
    _, height, width, _ = inputs.shape.as_list()
    ops = portable_kernel.ops()
    before = (size - 1) // 2  # SAME pads (size - 1) // 2 before, size // 2 after

    @tf.custom_gradient
    def convolution(inputs, kernel):
        outputs = ops.portable_windows_mat_mul(inputs, tf.reshape(kernel, [-1, filters]), size=size, before=before)

        def gradients(upstream):
            by_position = tf.reshape(upstream, [-1, filters])
            of_kernel = ops.portable_windows_mat_mul(
                inputs, by_position, size=size, before=before, transpose_windows=True
            )
            # the inputs': the gradient, padded on the other sides, convolved with the kernel turned half a circle
            # and its channels swapped
            flipped = tf.reshape(tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2]), [-1, channels])
            to_inputs = ops.portable_windows_mat_mul(upstream, flipped, size=size, before=size // 2)
            return tf.reshape(to_inputs, [-1, height, width, channels]), tf.reshape(of_kernel, kernel.shape)

        return tf.reshape(outputs, [-1, height, width, filters]), gradients

    return convolution(inputs, kernel)


def max_pool(inputs, size):
    """A size x size max pool of NHWC `inputs` at stride `size` ('SAME'): TensorFlow's, and with portable kernels
    its gradient by PortableMaxPoolGrad (the same numbers: each window's gradient to its first largest input), as
    TensorFlow's own is 16 ms a step of recipes/cifar10.py's model here against 1 ms. Where `inputs` are a ReLU's
    outputs, the op takes the gradient on through the ReLU as well, the bits of ReluGrad after it (the product by 1
    or 0), in one pass over the inputs instead of two: the ReLU's own gradient then never runs."""
    pooled = tf.nn.max_pool(inputs, ksize=[1, size, size, 1], strides=[1, size, size, 1], padding="SAME")
    if tensorflows():
        return pooled
    relu = inputs.op.type == "Relu"

    @tf.custom_gradient
    def pool(reaches):  # the tensor the gradient reaches: the ReLU's input, or the pool's
        return pooled, lambda upstream: portable_kernel.ops().portable_max_pool_grad(
            inputs, upstream, size=size, relu=relu
        )

    return pool(inputs.op.inputs[0] if relu else inputs)
