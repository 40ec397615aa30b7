"""Matrix products and convolutions whose bits do not depend on the CPU: no sum is longer than the
shortest run of terms any x86-64 CPU's kernel adds in one go.

A product's bits follow the order its sums are added in, and TensorFlow's CPU kernels let the machine
choose it. Its Eigen contraction hands the work to oneDNN's sgemm, which picks its code by the CPU's
vendor and instruction set (compat.py turns that kernel off), and its Conv2DBackpropInput calls that
sgemm whatever it is asked (ONEDNN_MAX_CPU_ISA=AVX against AVX2 changed its bits). Eigen's own kernel is
compiled once, into the wheel (AVX, no FMA): no code is chosen at run time, but two of its choices read the
machine's caches:
- it adds a dot product in runs of kc terms and reads kc off the L1 cache: with one thread, a
  [64 x 1024] x [1024 x 128] product ended on other bits natively (48 KB L1) than under
  `qemu-x86_64 -cpu EPYC-Rome-v1` (32 KB). So no kernel here sums more than PIECE terms: a longer sum is
  cut into P = ceil(k / PIECE) runs of (nearly) equal length, each run one product, and the P partial sums
  added in an order fixed by P.
- on its thread pool, it splits a sum over the threads (shardByInnerDim in TensorContractionThreadPool.h)
  only if the output fits in a thread's share of the L3 cache, and only where the sum is longer than
  8·nr = 32 terms a thread and an outer dimension is under 2·nr = 8 (nr = 4 in the wheel's AVX kernel):
  a product such as [rows x 288] x [288 x 2] with a megabyte of output is summed in one order on a machine
  with a large L3 and in another on one with a small L3. Where a product may be so (an outer dimension
  under 8, and an output that may exceed FITS_EVERY_L3), its sums are cut into runs of at most SHORT_PIECE
  terms, 32 a thread of two, which Eigen never splits (tests/test_products.py).

Every sum's order then follows the shapes and the intra-op thread count alone (tests/test_portable_bits.py:
natively, under every ONEDNN_MAX_CPU_ISA cap, and under QEMU's AMD and Intel models). `matmul` and
`conv2d_same` compute their gradients the same way; the weights' gradients, which sum over a batch's rows,
are a model's longest sums. --kernels=fast runs TensorFlow's own ops instead.
"""

from parallel_tf import compat
from parallel_tf.compat import tf

# Eigen's smallest kc on x86-64: a 32 KB L1 and register blocks of 3 x 8 rows (an FMA build; TensorFlow's
# AVX build blocks 2 x 8 and gets 320 or more): ((32768 - 3·8·4·4) / ((3·8 + 4)·4)) rounded down to 8s.
PIECE = 288
# Where Eigen may split a sum over its threads by the L3 cache (the module's docstring): outer dimensions under
# TINY_OUTER, an output over FITS_EVERY_L3 bytes (Eigen's default L3, 512 KB, where the CPU reports none, over
# the 2 threads of a split), and runs of SHORT_PIECE terms, no more than 8·nr a thread of two.
TINY_OUTER = 8
FITS_EVERY_L3 = 256 * 1024
SHORT_PIECE = 64


def matmul(a, b):
    """a [m, k] @ b [k, n], and its gradients, no sum longer than PIECE terms."""
    if compat.kernels() == "fast":
        return tf.matmul(a, b)

    @tf.custom_gradient
    def product(a, b):
        def gradients(upstream):
            return contract(upstream, b, transpose_b=True), contract(a, upstream, transpose_a=True)

        return contract(a, b), gradients

    return product(a, b)


def contract(a, b, transpose_a=False, transpose_b=False):
    """op(a) @ op(b) for matrices, as tf.matmul's arguments say, no sum longer than PIECE terms (SHORT_PIECE
    where Eigen could split it by the L3 cache): a sum of known length is cut into runs added left to right;
    one known only at run time (a batch's rows), into runs of one batched product, added by reduce_sum."""
    depth = a.shape.as_list()[0 if transpose_a else 1]
    rows = a.shape.as_list()[1 if transpose_a else 0]
    columns = b.shape.as_list()[0 if transpose_b else 1]
    piece = longest_run(rows, columns)
    if compat.kernels() == "fast" or (depth is not None and depth <= piece):
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    if depth is not None:
        runs = _run_lengths(depth, piece)
        return tf.add_n(
            [
                tf.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)
                for x, y in zip(
                    tf.split(a, runs, axis=0 if transpose_a else 1),
                    tf.split(b, runs, axis=1 if transpose_b else 0),
                    strict=True,
                )
            ]
        )
    by_term_a = a if transpose_a else tf.transpose(a)  # [k, m]: one row a term of the sums
    by_term_b = tf.transpose(b) if transpose_b else b  # [k, n]
    return _sum_of_runs(by_term_a, by_term_b, piece)


def longest_run(rows, columns):
    """The longest sum a product of an output [rows x columns] (None: known at run time) may make: PIECE, or
    SHORT_PIECE where Eigen could split its sums by the L3 cache (an outer dimension under TINY_OUTER, and an
    output that is, or may be, over FITS_EVERY_L3 bytes)."""
    known = [size for size in (rows, columns) if size is not None]
    tiny = any(size < TINY_OUTER for size in known)
    may_not_fit = len(known) < 2 or rows * columns * 4 > FITS_EVERY_L3
    return SHORT_PIECE if tiny and may_not_fit else PIECE


def _run_lengths(depth, piece=PIECE):
    """ceil(depth / piece) lengths as equal as can be, longest first, summing to depth."""
    count = -(-depth // piece)
    return [depth // count + (index < depth % count) for index in range(count)]


def _sum_of_runs(a, b, piece=PIECE):
    """aᵀ b for a [k, m] and b [k, n], k known at run time: the products of ceil(k / piece) runs of equal
    length (the last padded with zero terms, which add nothing), then their sum."""
    depth = tf.shape(a)[0]
    count = tf.maximum((depth + piece - 1) // piece, 1)
    length = (depth + count - 1) // count
    padding = [[0, count * length - depth], [0, 0]]
    a = tf.reshape(tf.pad(a, padding), [count, length, _columns(a)])
    b = tf.reshape(tf.pad(b, padding), [count, length, _columns(b)])
    return tf.reduce_sum(tf.matmul(a, b, adjoint_a=True), axis=0)


def _columns(matrix):
    columns = matrix.shape.as_list()[1]
    return tf.shape(matrix)[1] if columns is None else columns


def conv2d_same(inputs, kernel):
    """A stride-1 'SAME' convolution of NHWC `inputs` by `kernel` [k, k, c_in, c_out], and its gradients,
    no sum longer than PIECE terms: TensorFlow's own forward convolution, cut into input-channel groups;
    the inputs' gradient as the convolution it is (the flipped kernel over the gradient), cut the same way;
    the kernel's as a product of the image's windows and the gradient, over the batch's rows."""
    if compat.kernels() == "fast":
        return tf.nn.conv2d(inputs, kernel, [1, 1, 1, 1], "SAME")

    @tf.custom_gradient
    def convolution(inputs, kernel):
        def gradients(upstream):
            return _inputs_gradient(upstream, kernel), _kernel_gradient(inputs, upstream, kernel.shape.as_list())

        return _convolve(inputs, kernel, "SAME"), gradients

    return convolution(inputs, kernel)


def _convolve(inputs, kernel, padding):
    """tf.nn.conv2d, its sums over (row, column, input channel) cut into groups of input channels; a product of
    the image's windows [batch·positions x terms] and the kernel [terms x filters] to Eigen."""
    size, _, channels, filters = kernel.shape.as_list()
    piece = longest_run(None, filters)
    if size * size > piece:
        raise ValueError(f"a {size}x{size} kernel sums more than {piece} terms a channel")
    group = piece // (size * size)
    sizes = [min(group, channels - start) for start in range(0, channels, group)]
    return tf.add_n(
        [
            tf.nn.conv2d(x, w, [1, 1, 1, 1], padding)
            for x, w in zip(tf.split(inputs, sizes, axis=3), tf.split(kernel, sizes, axis=2), strict=True)
        ]
    )


def _inputs_gradient(upstream, kernel):
    """The gradient reaching a SAME convolution's inputs: `upstream`, padded on the other sides, convolved
    with the kernel turned half a circle and its channels swapped."""
    size = kernel.shape.as_list()[0]
    before, after = size // 2, (size - 1) // 2  # SAME padded (size-1)//2 before and size//2 after
    padded = tf.pad(upstream, [[0, 0], [before, after], [before, after], [0, 0]])
    return _convolve(padded, tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2]), "VALID")


def _kernel_gradient(inputs, upstream, shape):
    """Each window of the padded inputs times the gradient at its position, summed over every position: in
    runs of an image's positions (the longest whole share of them at most PIECE long, so no run is padded),
    the runs' products added by reduce_sum. (A product per kernel position instead of the windows'
    concatenation measured the same: 70-72 ms a step of recipes/cifar10.py's model at batch 120 either way,
    three interleaved rounds of 40 steps.)"""
    size, _, channels, filters = shape
    _, height, width, _ = inputs.shape.as_list()
    positions = height * width
    piece = longest_run(size * size * channels, filters)
    length = max(d for d in range(1, min(positions, piece) + 1) if positions % d == 0)
    windows = tf.reshape(_windows(inputs, size), [-1, length, size * size * channels])
    runs = tf.matmul(windows, tf.reshape(upstream, [-1, length, filters]), adjoint_a=True)
    return tf.reshape(tf.reduce_sum(runs, axis=0), shape)


def _windows(inputs, size):
    """[batch, height, width, size·size·channels]: each position's window of the zero-padded inputs, in the
    kernel's order (row, column, channel)."""
    _, height, width, _ = inputs.shape.as_list()
    before, after = (size - 1) // 2, size // 2
    padded = tf.pad(inputs, [[0, 0], [before, after], [before, after], [0, 0]])
    return tf.concat(
        [padded[:, row : row + height, column : column + width, :] for row in range(size) for column in range(size)],
        axis=3,
    )
