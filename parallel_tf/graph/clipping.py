"""Global-norm gradient clipping (Pascanu, Mikolov, Bengio, "On the difficulty of training recurrent
neural networks", ICML 2013): an update's gradients g_1..g_k, taken together as one vector, are scaled
by c / max(‖g‖, c), with ‖g‖ = √(Σ_i ‖g_i‖²); below the threshold c they pass unchanged. This is what
tf.clip_by_global_norm computes, placed for a cluster: each ‖g_i‖² is summed next to its gradient
(wherever the update's gradients are: the parameter servers, or the pushing worker), so only scalars
cross between tasks, and each g_i is scaled where it is.
"""

from parallel_tf.compat import tf
from parallel_tf.graph.optimizers import DelegatingOptimizer


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


class ClippedOptimizer(DelegatingOptimizer):
    """`optimizer`, applying every update's gradients clipped to a global norm of at most `threshold`. What
    SyncReplicasOptimizer and the ordered aggregation hand it is the chief's aggregated gradient, so that is
    what is clipped."""

    def __init__(self, optimizer, threshold, on_norm=None):
        super().__init__(optimizer)
        self._threshold = threshold
        self._on_norm = on_norm  # with each update's global norm: an op, e.g. a counter's increment

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        gradients, variables = zip(*grads_and_vars, strict=True)
        clipped = clip_by_global_norm(list(gradients), self._threshold, self._on_norm)
        return super().apply_gradients(zip(clipped, variables, strict=True), global_step, name)
