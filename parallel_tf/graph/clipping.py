"""Global-norm gradient clipping (Pascanu, Mikolov, Bengio, "On the difficulty of training recurrent
neural networks", ICML 2013): an update's gradients g_1..g_k, taken together as one vector, are scaled
by c / max(‖g‖, c), with ‖g‖ = √(Σ_i ‖g_i‖²); below the threshold c they pass unchanged. This is what
tf.clip_by_global_norm computes, placed for a cluster: each ‖g_i‖² is summed next to its gradient
(wherever the update's gradients are: the parameter servers, or the pushing worker), so only scalars
cross between tasks, and each g_i is scaled where it is.
"""

from parallel_tf.compat import tf


def clip_by_global_norm(gradients, threshold, on_norm=None):
    """The gradients scaled by threshold / max(global norm, threshold), once op `on_norm(norm)` (if given)
    has seen their global norm."""
    squares = []
    for gradient in gradients:
        with tf.colocate_with(gradient):
            squares.append(tf.reduce_sum(tf.square(gradient)))
    norm = tf.sqrt(tf.add_n(squares))
    with tf.control_dependencies([on_norm(norm)] if on_norm else []):
        scale = threshold / tf.maximum(norm, threshold)
    clipped = []
    for gradient in gradients:
        with tf.colocate_with(gradient):
            clipped.append(gradient * tf.cast(scale, gradient.dtype))
    return clipped


class ClippedOptimizer:
    """`optimizer`, applying every update's gradients clipped to a global norm of at most `threshold`;
    all else it delegates, so its slots, names and checkpoints are `optimizer`'s. What SyncReplicasOptimizer
    and the ordered aggregation hand it is the chief's aggregated gradient, so that is what is clipped.
    (Not a tf.train.Optimizer subclass: that would import TensorFlow with this module, and the launcher,
    which reads the techniques' declarations, must stay single-threaded.)"""

    def __init__(self, optimizer, threshold, on_norm=None):
        self._optimizer = optimizer
        self._threshold = threshold
        self._on_norm = on_norm  # with each update's global norm: an op, e.g. a counter's increment

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        gradients, variables = zip(*grads_and_vars, strict=True)
        clipped = clip_by_global_norm(list(gradients), self._threshold, self._on_norm)
        return self._optimizer.apply_gradients(zip(clipped, variables, strict=True), global_step, name)

    def get_name(self):
        return self._optimizer.get_name()

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._optimizer.variables()
