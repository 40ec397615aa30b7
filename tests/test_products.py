"""graph/products.py's sums in runs, with numbers worked out by hand. The sum 2²⁴ + 1 + 1 + ... is the
probe: float32 holds 2²⁴ + 288 exactly, but 2²⁴ + 1 rounds back to 2²⁴, so a kernel that adds the ones to
2²⁴ one at a time loses every one of them, and only a sum whose ones form a run of their own, added to
2²⁴ at the end, keeps them. The CPU-independence itself is tests/test_portable_bits.py's."""

import functools

import numpy as np
import pytest

from parallel_tf.compat import tf
from parallel_tf.graph import products

pytestmark = pytest.mark.inprocess

BIG = 2.0**24
ONES = products.PIECE  # a whole run of ones: 2²⁴ + 288 is even, so float32 holds it
EXPECTED = BIG + ONES


def terms():
    """[2²⁴, 0, ..., 0 | 1, ..., 1]: the first run sums to 2²⁴, the second to 288."""
    return np.concatenate([[BIG], np.zeros(products.PIECE - 1), np.ones(ONES)]).astype(np.float32)


def run(fetches, feed=None):
    with tf.Session() as sess:
        return sess.run(fetches, feed)


def test_a_sum_known_when_the_graph_is_built_is_added_in_runs():
    with tf.Graph().as_default():
        row = tf.constant(terms()[None, :])
        column = tf.ones([2 * products.PIECE, 1])
        in_runs = run(products.contract(row, column))
    assert functools.reduce(np.add, terms()) == BIG  # one term at a time, float32 loses every one
    assert in_runs[0, 0] == EXPECTED


def test_a_sum_over_rows_known_only_at_run_time_is_added_in_runs():
    """The weights' gradient: a batch of 576 examples, one feature each, a gradient of one from each."""
    with tf.Graph().as_default():
        rows = tf.placeholder(tf.float32, [None, 1])
        in_runs = products.contract(rows, tf.ones([tf.shape(rows)[0], 1]), transpose_a=True)
        assert run(in_runs, {rows: terms()[:, None]})[0, 0] == EXPECTED


def test_a_dense_layers_weight_gradient_sums_the_batch_in_runs():
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [None, 1])
        weight = tf.ones([1, 1])
        (gradient,) = tf.gradients(tf.reduce_sum(products.matmul(features, weight)), [weight])
        assert run(gradient, {features: terms()[:, None]})[0, 0] == EXPECTED


def test_a_convolutions_kernel_gradient_sums_the_positions_in_runs():
    """A 1x1 kernel over a 24x24 image: its gradient sums the image's 576 values, in two runs of 288."""
    with tf.Graph().as_default():
        image = tf.constant(terms().reshape(1, 24, 24, 1))
        kernel = tf.ones([1, 1, 1, 1])
        (gradient,) = tf.gradients(tf.reduce_sum(products.conv2d_same(image, kernel)), [kernel])
        assert run(gradient)[0, 0, 0, 0] == EXPECTED


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


def test_a_convolution_over_more_channels_than_a_run_holds_is_tensorflows_up_to_rounding():
    """3x3 over 40 channels sums 360 terms a position: two groups of channels, added."""
    random = np.random.RandomState(0)
    x, w = random.randn(2, 5, 5, 40).astype(np.float32), random.randn(3, 3, 40, 4).astype(np.float32)
    with tf.Graph().as_default():
        ours = products.conv2d_same(tf.constant(x), tf.constant(w))
        theirs = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
        ours, theirs = run([ours, theirs])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)


SHORT = products.SHORT_PIECE


def short_terms():
    """[2²⁴, 0, ..., 0 | 1, ..., 1] in two runs of SHORT_PIECE: 2²⁴ + 64 in runs, 2²⁴ one term at a time."""
    return np.concatenate([[BIG], np.zeros(SHORT - 1), np.ones(SHORT)]).astype(np.float32)


def matmul_depths(graph):
    """The length of the sums of every product in `graph`: the inner dimension of each MatMul and BatchMatMul."""
    depths = []
    for op in graph.get_operations():
        if op.type in ("MatMul", "BatchMatMulV2"):
            shape = op.inputs[0].shape.as_list()
            adjoint = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            depths.append(shape[-2] if adjoint else shape[-1])
    return depths


def test_a_product_eigen_could_split_by_the_l3_cache_sums_in_short_runs():
    """Logits of two classes, [rows x 128] x [128 x 2], rows known at run time: an outer dimension under 8 and an
    output that may exceed FITS_EVERY_L3 (a thousand rows... a million), which Eigen would split over its threads
    on a machine whose L3 holds it and not on one whose L3 does not. Its sums go in runs of 64, which it never
    splits; the weights' gradient [128 x 2] (1 KB) and the inputs' [rows x 128] keep runs of 288."""
    assert products.longest_run(None, 2) == SHORT and products.longest_run(128, 2) == products.PIECE
    assert products.longest_run(1 << 16, 2) == SHORT  # 512 KB of output
    assert products.longest_run(1 << 15, 2) == products.PIECE  # 256 KB: fits in a thread's share of any L3
    with tf.Graph().as_default() as graph:
        features = tf.placeholder(tf.float32, [None, 2 * SHORT])
        logits = products.matmul(features, tf.ones([2 * SHORT, 2]))
        assert matmul_depths(graph) == [SHORT, SHORT]
        assert run(logits, {features: short_terms()[None, :]}).tolist() == [[BIG + SHORT] * 2]


def test_a_convolution_to_fewer_than_8_filters_sums_each_position_in_short_runs():
    """3x3 over 16 channels into 4 filters sums 144 terms a position: runs of 7 channels (63 terms), 7, 2; the
    same numbers as TensorFlow's one sum, up to rounding."""
    random = np.random.RandomState(0)
    x, w = random.randn(2, 5, 5, 16).astype(np.float32), random.randn(3, 3, 16, 4).astype(np.float32)
    with tf.Graph().as_default() as graph:
        ours = products.conv2d_same(tf.constant(x), tf.constant(w))
        groups = [op.inputs[1].shape.as_list()[2] for op in graph.get_operations() if op.type == "Conv2D"]
        theirs = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
        ours, theirs = run([ours, theirs])
    assert groups == [7, 7, 2]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)
