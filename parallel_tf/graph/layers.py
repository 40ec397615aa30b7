"""Layers from `get_variable` and `tf.nn` ops only, so recipes run on TF 1.15 and 2.x alike, and every
product and every bias's gradient through the package's product, so they train the same bits on every x86-64 CPU
at every thread count."""

import numpy as np

from parallel_tf.compat import tf
from parallel_tf.graph import exact_math, products
from parallel_tf.graph.products import conv2d_same, matmul


def dense(inputs, units, name, activation=None):
    """A fully connected layer: activation(inputs @ weights + biases)."""
    with tf.variable_scope(name):
        weights = tf.get_variable("weights", [inputs.shape[-1], units], initializer=tf.glorot_uniform_initializer())
        biases = tf.get_variable("biases", [units], initializer=tf.zeros_initializer())
        outputs = add_bias(matmul(inputs, weights), biases)
    return activation(outputs) if activation else outputs


def add_bias(outputs, biases):
    """tf.nn.bias_add, its biases' gradient summed in order (exact_math.column_sums) where the kernels are portable:
    TensorFlow's BiasAddGrad splits that sum by the thread count once the gradient is large (the CIFAR-10 CNN's
    conv1: other bits at 1, 2 and 3 threads), which graph/exact_ops.py refuses."""
    if products.tensorflows():
        return tf.nn.bias_add(outputs, biases)

    @tf.custom_gradient
    def biased(outputs, biases):
        return tf.nn.bias_add(outputs, biases), lambda upstream: (upstream, exact_math.column_sums(upstream))

    return biased(outputs, biases)


def relu(x):
    """tf.nn.relu, named here so a default argument does not import TensorFlow (see compat.py)."""
    return tf.nn.relu(x)


def conv2d(inputs, filters, kernel_size, name, activation=relu):
    """A 'SAME' 2-D convolution over NHWC inputs, stride 1."""
    with tf.variable_scope(name):
        kernel = tf.get_variable(
            "kernel",
            [kernel_size, kernel_size, inputs.shape[-1], filters],
            initializer=tf.glorot_uniform_initializer(),
        )
        biases = tf.get_variable("biases", [filters], initializer=tf.zeros_initializer())
        outputs = add_bias(conv2d_same(inputs, kernel), biases)
    return activation(outputs) if activation else outputs


def max_pool(inputs, size=2):
    """A size x size max pool at stride `size` ('SAME')."""
    return products.max_pool(inputs, size)


def standardize(images):
    """tf.image.per_image_standardization's arithmetic, each image (x - mean) / max(stddev, 1/√n) over its n values,
    without its Rsqrt (an approximate instruction: graph/exact_ops.py), 1/√n a constant rounded once, and its sums
    over the n values in order (exact_math.row_sums: the same on TensorFlow 1.15 and 2.x)."""
    shape = images.shape.as_list()
    n = int(np.prod(shape[1:]))
    rows = tf.reshape(images, [-1, n])
    centred = rows - exact_math.row_sums(rows) / n
    stddev = exact_math.sqrt(exact_math.row_sums(tf.square(centred)) / n)
    return tf.reshape(centred / tf.maximum(stddev, np.float32(1 / np.sqrt(n))), [-1, *shape[1:]])


def flatten(inputs):
    return tf.reshape(inputs, [-1, int(np.prod(inputs.shape.as_list()[1:]))])
