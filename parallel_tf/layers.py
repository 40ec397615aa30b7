"""Layers from `get_variable` and `tf.nn` ops only, so recipes run on TF 1.15 and 2.x alike."""

from parallel_tf.compat import tf


def dense(inputs, units, name, activation=None):
    """A fully connected layer: activation(inputs @ weights + biases)."""
    with tf.variable_scope(name):
        weights = tf.get_variable("weights", [inputs.shape[-1], units], initializer=tf.glorot_uniform_initializer())
        biases = tf.get_variable("biases", [units], initializer=tf.zeros_initializer())
        outputs = tf.nn.bias_add(tf.matmul(inputs, weights), biases)
    return activation(outputs) if activation else outputs
