"""graph/products.py's portable kernels, with numbers worked out by hand: every sum added in order, term 0 first,
each term by a fused multiply-add (one rounding), whatever the shape, the layout (a transpose is the same sums) or
the thread count; a convolution as its windows times its kernel. The CPU-independence itself is
tests/test_portable_bits.py's.

Two probes. 2²⁴ + 1 rounds back to 2²⁴ in float32 (the 1 is half an ulp, and ties go to even), so a sum that
starts with 2²⁴ loses every 1 after it, and one that adds the ones first keeps them: the order shows. And with
a = 1 + 2⁻¹², a·a = 1 + 2⁻¹¹ + 2⁻²⁴ exactly, which float32 rounds to 1 + 2⁻¹¹: after -(1 + 2⁻¹¹), a fused
multiply-add leaves 2⁻²⁴ where a product rounded first and then added leaves 0."""

import numpy as np
import pytest

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph import products

pytestmark = pytest.mark.inprocess

BIG = 2.0**24
A = 1.0 + 2.0**-12


def run(fetches, feed=None):
    with tf.Session() as sess:
        return sess.run(fetches, feed)


def test_a_sum_is_added_in_order_term_0_first():
    """[2²⁴, 1 × 600]: each 1 lost; [1 × 600, 2²⁴]: 2²⁴ + 600 (even: float32 holds it). 601 terms: more than one
    block of the kernel's 256, and more than any run Eigen would add in one go."""
    with tf.Graph().as_default():
        ones = np.ones(600, np.float32)
        big_first = tf.constant(np.concatenate([[BIG], ones]).astype(np.float32)[None, :])
        big_last = tf.constant(np.concatenate([ones, [BIG]]).astype(np.float32)[None, :])
        column = tf.ones([601, 1])
        first, last = run([products.contract(big_first, column), products.contract(big_last, column)])
    assert (first[0, 0], last[0, 0]) == (BIG, BIG + 600)


def test_each_term_is_a_fused_multiply_add():
    """[1, a] · [-(1 + 2⁻¹¹), a] = fma(a, a, -(1 + 2⁻¹¹)) = 2⁻²⁴; in the other order the first product is rounded
    alone (a multiply-add onto 0) and the sum is 0."""
    with tf.Graph().as_default():
        row = tf.constant([[1.0, A]], tf.float32)
        column = tf.constant([[-(1.0 + 2.0**-11)], [A]], tf.float32)
        forward = products.contract(row, column)
        backward = products.contract(tf.reverse(row, [1]), tf.reverse(column, [0]))
        assert run([forward, backward]) == [[[2.0**-24]], [[0.0]]]


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_transpose_is_the_same_sums(transpose_a, transpose_b):
    """Matrices laid out either way give the same bits: a layout changes where the terms are read, not their order.
    47 x 601 x 37: rows and columns past whole 6 x 16 blocks, terms past a block of 256."""
    random = np.random.RandomState(0)
    a, b = random.randn(47, 601).astype(np.float32), random.randn(601, 37).astype(np.float32)
    with tf.Graph().as_default():
        plain = products.contract(tf.constant(a), tf.constant(b))
        laid_out = products.contract(
            tf.constant(a.T.copy() if transpose_a else a),
            tf.constant(b.T.copy() if transpose_b else b),
            transpose_a=transpose_a,
            transpose_b=transpose_b,
        )
        plain, laid_out = run([plain, laid_out])
    assert plain.tobytes() == laid_out.tobytes()
    np.testing.assert_allclose(plain, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_dense_layers_weight_gradient_sums_the_batch_in_order():
    """The weights' gradient of y = x w, loss Σ y: Σ over the batch's rows of x, in the rows' order."""
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [None, 1])
        weight = tf.ones([1, 1])
        (gradient,) = tf.gradients(tf.reduce_sum(products.matmul(features, weight)), [weight])
        batch = np.concatenate([np.ones(300), [BIG]]).astype(np.float32)[:, None]
        assert run(gradient, {features: batch})[0, 0] == BIG + 300
        assert run(gradient, {features: batch[::-1].copy()})[0, 0] == BIG


def test_a_convolutions_kernel_gradient_sums_the_positions_in_order():
    """A 1x1 kernel over a 24x24 image: its gradient sums the image's 576 values, position by position, row by row:
    2²⁴ at the first position loses the ones after it, at the last it keeps them: 575 + 2²⁴, odd, rounds to the
    even neighbour 2²⁴ + 576 (float32's spacing there is 2; numpy before 2.0 compares a float32 with a Python
    float in float64, so the expected value is float32's)."""
    kernel = tf.ones([1, 1, 1, 1])
    for image, expected in (
        (np.concatenate([[BIG], np.ones(575)]), BIG),
        (np.concatenate([np.ones(575), [BIG]]), BIG + 576),
    ):
        with tf.Graph().as_default():
            kernel = tf.ones([1, 1, 1, 1])
            (gradient,) = tf.gradients(
                tf.reduce_sum(products.conv2d_same(tf.constant(image.reshape(1, 24, 24, 1), tf.float32), kernel)),
                [kernel],
            )
            assert run(gradient)[0, 0, 0, 0] == expected


def test_a_convolutions_gradients_at_one_corner_of_a_3x3_image():
    """y = x ⋆ w (SAME, zero padding), the loss y[0, 0]: then ∂/∂x[i, j] = w[i + 1, j + 1] where that is
    inside the kernel, and ∂/∂w[r, c] = x_padded[r, c] = x[r - 1, c - 1], zero on the padding."""
    x = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    w = np.arange(10, 19, dtype=np.float32).reshape(3, 3)
    with tf.Graph().as_default():
        image, kernel = tf.constant(x.reshape(1, 3, 3, 1)), tf.constant(w.reshape(3, 3, 1, 1))
        output = products.conv2d_same(image, kernel)
        inputs_gradient, kernel_gradient = run(tf.gradients(output[0, 0, 0, 0], [image, kernel]))
    assert inputs_gradient[0, :, :, 0].tolist() == [[14, 15, 0], [17, 18, 0], [0, 0, 0]]
    assert kernel_gradient[:, :, 0, 0].tolist() == [[0, 0, 0], [0, 1, 2], [0, 4, 5]]


@pytest.mark.parametrize("shape", [(2, 5, 5, 3, 4, 3), (3, 8, 8, 16, 32, 3), (2, 7, 6, 5, 7, 5), (1, 4, 4, 2, 3, 2)])
def test_a_convolution_and_its_gradients_are_tensorflows_up_to_rounding(shape):
    """Windows of odd and even sizes, channels that fill no block, images that are not square."""
    batch, height, width, channels, filters, size = shape
    random = np.random.RandomState(0)
    x = random.randn(batch, height, width, channels).astype(np.float32)
    w = random.randn(size, size, channels, filters).astype(np.float32)
    upstream = random.randn(batch, height, width, filters).astype(np.float32)
    with tf.Graph().as_default():
        image, kernel = tf.constant(x), tf.constant(w)
        ours, theirs = products.conv2d_same(image, kernel), tf.nn.conv2d(image, kernel, [1, 1, 1, 1], "SAME")
        gradients = [tf.gradients(y, [image, kernel], grad_ys=tf.constant(upstream)) for y in (ours, theirs)]
        (ours, mine), (theirs, tensorflows) = run([(ours, gradients[0]), (theirs, gradients[1])])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)
    for a, b in zip_strict(mine, tensorflows):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def _windows(images, size, before):
    """Every position's size x size window of NHWC `images`, zeros outside, one row a position (row, column,
    channel): the matrix the windows op reads in place, written out."""
    batch, height, width, channels = images.shape
    after = size - 1 - before
    padded = np.pad(images, [(0, 0), (before, after), (before, after), (0, 0)])
    rows = [padded[:, dy : dy + height, dx : dx + width, :] for dy in range(size) for dx in range(size)]
    return np.stack(rows, axis=3).reshape(batch * height * width, size * size * channels)


@pytest.mark.parametrize("channels", [1, 3, 5, 16, 32, 48])
def test_a_kernel_gradient_is_the_dense_kernels_sums_over_the_written_out_windows(channels):
    """windowsᵀ @ g, bit for bit the dense kernel's product of the windows written out: where the channels come in
    whole panels of 16 (16, 32, 48) the op multiplies by the windows as B and transposes the product, else it copies
    a panel's terms as A in runs that lie in one row of the window (1, 3 and 5 channels: runs of 3, 9 and 15 terms,
    which panels of 6 cross); either way each element is the same sums in the same order. 3 images of 9 x 10: 270
    positions, summed in two blocks of 135, the second from the middle of an image row; rows past whole 6 x 32
    blocks; a 3 x 3 window, padding on every side."""
    random = np.random.RandomState(channels)
    images = random.randn(3, 9, 10, channels).astype(np.float32)
    images[:, 2, 3, :] = 0.0  # zeros inside the image too, as ReLU leaves them
    upstream = random.randn(270, 37).astype(np.float32)
    with tf.Graph().as_default():
        ops = products.portable_kernel.ops()
        of_windows = ops.portable_windows_mat_mul(
            tf.constant(images), tf.constant(upstream), size=3, before=1, transpose_windows=True
        )
        written_out = products.contract(tf.constant(_windows(images, 3, 1)), tf.constant(upstream), transpose_a=True)
        of_windows, written_out = run([of_windows, written_out])
    assert of_windows.tobytes() == written_out.tobytes()
    np.testing.assert_allclose(of_windows, _windows(images, 3, 1).T.astype(np.float64) @ upstream, rtol=1e-4, atol=1e-4)


def test_a_max_pools_gradient_is_tensorflows_bit_for_bit():
    """Each window's gradient to its first largest input, ties included (two equal values in the first window)."""
    random = np.random.RandomState(0)
    x = random.randn(2, 7, 5, 4).astype(np.float32)
    x[0, 0, 1, 0] = x[0, 0, 0, 0]
    with tf.Graph().as_default():
        image = tf.constant(x)
        ours = products.max_pool(image, 2)
        theirs = tf.nn.max_pool(image, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        upstream = tf.constant(random.randn(2, 4, 3, 4).astype(np.float32))
        (ours, mine), (theirs, tensorflows) = run(
            [
                (ours, tf.gradients(ours, [image], grad_ys=upstream)),
                (theirs, tf.gradients(theirs, [image], grad_ys=upstream)),
            ]
        )
    assert ours.tobytes() == theirs.tobytes() and mine[0].tobytes() == tensorflows[0].tobytes()


@pytest.mark.parametrize("channels", [1, 8])  # 8: the op's 2 x 2 windows eight channels at a time
def test_a_pools_gradient_goes_on_through_the_relu_before_it_as_relugrad_would(channels):
    """Two windows, worked by hand: [-1, -2 / -3, -4] leaves the ReLU all 0, so its gradient -5 reaches the first
    input times 0, -0 (ReluGrad's product, not a 0 written); [1, 3 / 3, 2] sends 2 to its first 3. No ReluGrad
    runs: the pool's op takes the gradient through."""
    x = np.repeat(np.array([[-1, -2, 1, 3], [-3, -4, 3, 2]], np.float32)[None, :, :, None], channels, axis=3)
    upstream = np.repeat(np.array([[-5, 2]], np.float32)[None, :, :, None], channels, axis=3)
    with tf.Graph().as_default() as graph:
        image = tf.constant(x)
        (gradient,) = tf.gradients(products.max_pool(tf.nn.relu(image), 2), [image], grad_ys=tf.constant(upstream))
        assert "ReluGrad" not in {op.type for op in graph.get_operations()}
        gradient = run(gradient)
    expected = np.repeat(np.array([[-0.0, 0, 0, 2], [0, 0, 0, 0]], np.float32)[None, :, :, None], channels, axis=3)
    assert gradient.tobytes() == expected.tobytes()


@pytest.mark.parametrize("shape", [(2, 7, 5, 4), (2, 8, 6, 16)])  # an input at a time; 2 x 2 windows 8 at a time
def test_a_pools_gradient_through_its_relu_is_tensorflows_bit_for_bit(shape):
    """relu then pool, ours against TensorFlow's MaxPoolGrad and ReluGrad: negative gradients stopped at -0, a NaN
    gradient stopped as NaN, windows all below 0 and all 0."""
    random = np.random.RandomState(1)
    x = random.randn(*shape).astype(np.float32)
    x[0, :2, :2, :] = -1.0
    x[1, :2, :2, :] = 0.0
    upstream = random.randn(shape[0], (shape[1] + 1) // 2, (shape[2] + 1) // 2, shape[3]).astype(np.float32)
    upstream[0, 0, 0, 0] = np.nan
    with tf.Graph().as_default():
        image = tf.constant(x)
        ours = tf.gradients(products.max_pool(tf.nn.relu(image), 2), [image], grad_ys=upstream)[0]
        pooled = tf.nn.max_pool(tf.nn.relu(image), [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        tensorflows = tf.gradients(pooled, [image], grad_ys=upstream)[0]
        ours, tensorflows = run([ours, tensorflows])
    assert np.signbit(ours).any() and np.isnan(ours).sum() == 1
    assert ours.tobytes() == tensorflows.tobytes()
