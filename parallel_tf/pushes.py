"""Summed gradients sent to the parameter servers, and counted: Downpour's push (async mode) and a
group's exchange with the central parameter servers (hierarchical mode) are the same three steps:
apply the sum with the optimizer, zero it, count the push."""

from parallel_tf.compat import tf


def push_counter(name, size):
    """An int64 vector on the parameter servers: pushes by each worker (or group), logged by the chief."""
    return tf.get_variable(name, [size], tf.int64, tf.zeros_initializer(), trainable=False)


class GradientSum:
    """One zero-initialised variable per parameter, in `collections`, to sum gradients into between pushes."""

    def __init__(self, like, collections, name):
        self.variables = [
            tf.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False, collections=collections, name=name)
            for v in like
        ]

    def add(self, gradients):
        """The op values of the sums once `gradients` (one per variable) are added."""
        return [tf.identity(s.assign_add(g)) for s, g in zip(self.variables, gradients, strict=True)]

    def push(self, optimizer, sums, parameters, global_step, counter, index):
        """Applies `sums` (this sum's values) to `parameters` with `optimizer`; then zeroes the sum and
        adds 1 to counter[index]."""
        applied = optimizer.apply_gradients(zip(sums, parameters, strict=True), global_step=global_step)
        with tf.control_dependencies([applied]):
            return tf.group(
                tf.scatter_add(counter, [index], tf.constant([1], tf.int64)),
                *[s.assign(tf.zeros_like(s)) for s in self.variables],
            )
