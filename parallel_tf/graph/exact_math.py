"""Arithmetic whose bits are the same on every CPU and in every supported TensorFlow version: a square root, long
sums in order, and the recipes' softmax cross-entropy with its gradient in IEEE operations alone
(--kernels=portable).

TensorFlow 1.15 computes a float32 square root by RSQRTPS and a Newton step (57% of results correctly rounded, up
to 3 ulp off, and bits that differ between Intel and AMD); a float64 one it computes exactly, as 2.x does both. So
`sqrt` takes a float32 square root in float64: the correctly rounded double, rounded to float, is the correctly
rounded float (53 ≥ 2·24 + 2 bits: the double rounding is innocuous).

TensorFlow's SparseSoftmaxCrossEntropyWithLogits computes its gradient, softmax - onehot, with Eigen's exp and
Eigen's sum over the classes, and Eigen's code changed between TensorFlow 1.15 and 2.x: the one cause the README's
default run ended on other bits on 1.15 (90 of 640 values of a step's softmax 1 ulp off). Here exp is Cephes'
expf (range reduction by ln 2 in two parts, a degree-6 polynomial, 2^n from its bits), each operation a TensorFlow
op of one rounding an element, and the sum over the classes runs in their order. The loss's value, which the
gradient does not use, takes TensorFlow's log: a logged or summarised loss may differ in its last bits between
TensorFlow versions, the parameters do not.
"""

from parallel_tf.compat import tf
from parallel_tf.graph import products

LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 10 bits
EXPF = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
LOWEST, HIGHEST = -87.0, 88.0  # exp's argument: 2^n stays a normal float32


def sqrt(x):
    """√x, correctly rounded, for float32 x (see above), on TensorFlow 1.15 as on 2.x."""
    if x.dtype.base_dtype != tf.float32:
        return tf.sqrt(x)
    return tf.cast(tf.sqrt(tf.cast(x, tf.float64)), tf.float32)


def row_sums(x):
    """[rows, 1]: each row's sum of `x` [rows, k], term 0 first, in this package's product (products.contract: x
    times a column of ones, each term added by a fused multiply-add by 1, which rounds as the addition does). Eigen's
    reductions sum a long row (64 terms and more) in a tree TensorFlow 1.15 and 2.x cut otherwise."""
    return products.contract(x, tf.ones([x.shape.as_list()[1], 1], x.dtype))


def column_sums(x):
    """[channels]: the sum of `x` [..., channels] over every leading position, row 0 first, in this package's
    product (see row_sums). TensorFlow's BiasAddGrad cuts this sum in blocks by the thread count; summed in
    order it is BiasAddGrad's single-threaded result, at any count."""
    rows = tf.reshape(x, [-1, x.shape.as_list()[-1]])
    return tf.reshape(products.contract(tf.ones(tf.stack([1, tf.shape(rows)[0]]), x.dtype), rows), [-1])


def dot(a, b):
    """Σ a·b over every element of `a` and `b` (of one shape), in order, each term by a fused multiply-add, in this
    package's product (see row_sums)."""
    return tf.reshape(products.contract(tf.reshape(a, [1, -1]), tf.reshape(b, [1, -1]), transpose_b=True), [])


def sum_of_squares(x):
    """Σ x², every element of `x`, in order (dot)."""
    return dot(x, x)


def norm(x, axis=None):
    """The Euclidean norm of `x` (of each row of a matrix, axis=1), its squares summed in order and its square root
    correctly rounded: the same on every TensorFlow version."""
    if axis is None:
        return sqrt(sum_of_squares(x))
    assert axis == 1 and len(x.shape) == 2, (axis, x.shape)
    return sqrt(tf.squeeze(row_sums(tf.square(x)), 1))


def exp(x):
    """e^x for float32 x, within 2 ulp of the true value over [-87, 88] (clamped there), by Cephes' expf."""
    x = tf.clip_by_value(x, LOWEST, HIGHEST)
    n = tf.floor(x * LOG2E + 0.5)
    r = (x - n * LN2_HI) - n * LN2_LO
    p = tf.fill(tf.shape(r), EXPF[0])
    for coefficient in EXPF[1:]:
        p = p * r + coefficient
    y = (p * (r * r) + r) + 1.0
    two_to_n = tf.bitcast(tf.bitwise.left_shift(tf.cast(n, tf.int32) + 127, 23), tf.float32)
    return y * two_to_n


def sum_in_order(columns):
    """[rows, 1]: each row's sum over the columns of `columns` [rows, k], column 0 first."""
    total = columns[:, :1]
    for j in range(1, columns.shape.as_list()[1]):
        total = total + columns[:, j : j + 1]
    return total


def sparse_softmax_cross_entropy(labels, logits):
    """Each example's −log softmax(logits)[label], as tf.nn.sparse_softmax_cross_entropy_with_logits; its gradient
    with respect to the logits, softmax − onehot(label), in IEEE operations (see above)."""

    @tf.custom_gradient
    def cross_entropy(logits):
        shifted = logits - tf.reduce_max(logits, axis=1, keepdims=True)
        exps = exp(shifted)
        total = sum_in_order(exps)
        softmax = exps / total
        onehot = tf.one_hot(labels, logits.shape[1], dtype=logits.dtype)
        picked = tf.reduce_sum(shifted * onehot, axis=1)  # one term and zeros: the label's logit, exactly
        value = tf.log(tf.squeeze(total, 1)) - picked

        def gradient(upstream):
            return (softmax - onehot) * tf.expand_dims(upstream, 1)

        return value, gradient

    return cross_entropy(logits)
