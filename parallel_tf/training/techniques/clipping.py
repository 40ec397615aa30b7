"""Global-norm gradient clipping (Pascanu, Mikolov, Bengio, "On the difficulty of training recurrent neural
networks", ICML 2013), sync, all-reduce and async modes, --clip_norm=c: every update applied to the parameters
has its gradients g_1..g_k, taken together as one vector, scaled by c / max(‖g‖, c), with ‖g‖ = √(Σ_i ‖g_i‖²),
just before the optimizer applies them: what tf.clip_by_global_norm computes, placed for a cluster. Each
‖g_i‖² is summed next to its gradient and each g_i scaled where it is, so only scalars cross between tasks: on
the parameter servers in sync; in async on the pushing worker, or on the parameter server when a hook has
decoded or compensated it there.
What an update is decides what is clipped, as it does in one process:
    sync   the chief's aggregated gradient, the mean of the step's gradients (ordered or accumulator):
           a 1-worker cluster clips as one process would;
    allreduce  the all-reduced mean, on every worker alike, so the copies stay equal;
    async  each push as the parameter servers apply it: after decoding (compression) and compensation
           (DC-ASGD), and softsync's mean of pushes, not the pushes it averages.
It keeps every promise of the mode: an ordered sync run still repeats bitwise, and strict runs agree
across worker counts, since the aggregated gradient does. `clipped_updates` counts the updates whose
norm was above c. The techniques that build the mode's graph their own way (backup workers, local
SGD, EASGD) do not call the hook, so the rules refuse them with it.
"""

from __future__ import annotations

from typing import Any

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph import exact_math, exact_ops
from parallel_tf.graph.optimizers import DelegatingOptimizer
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph

COUNTER = "clipped_updates"


class Options(Flags):
    clip_norm: float = flag(
        0.0,
        "sync, async and allreduce: clip each update's gradients to this global norm (Pascanu et al., ICML 2013) "
        "before the optimizer applies them; 0: off.",
        lower_bound=0.0,
    )


TECHNIQUE = Technique(
    name="clipping",
    whole_variables=True,  # the norm sums each variable's squares: pieces would sum them in another order
    effect="clipped_updates",
    modes=("sync", "async", "allreduce"),
    hooks=("optimizer", "wrap"),
    options=Options,
)


class Clipping(OfOneGraph):
    """Clipping's hooks on one graph, sharing the counter of the updates it shrank: made by the first update the
    optimizer builds, logged by `wrap` (in sync the chief's graph alone applies updates, and has it)."""

    def __init__(self) -> None:
        self._clipped: Any = None  # the counter, a TensorFlow variable once an update is built

    def optimizer(self, settings, optimizer):
        """`optimizer`, clipping what it applies to --clip_norm and counting the updates it shrank."""
        threshold = settings.options.clip_norm

        def count(norm):  # async: every worker's pushes count into one counter, under its lock
            return self._counter().assign_add(tf.cast(norm > threshold, tf.int64), use_locking=True)

        return ClippedOptimizer(optimizer, threshold, count)

    def wrap(self, settings, graph):
        """Logs `clipped_updates`, from the graphs that apply updates."""
        return graph.counting({COUNTER: self._clipped} if self._clipped is not None else {})

    def _counter(self):
        if self._clipped is None:
            with tf.init_scope(), tf.variable_scope("clipping"):  # made outside a loop of steps
                self._clipped = tf.get_variable(COUNTER, [], tf.int64, tf.zeros_initializer(), trainable=False)
        return self._clipped


HOOKS = Clipping()


def clip_by_global_norm(gradients, threshold, on_norm=None):
    """The gradients scaled by threshold / max(global norm, threshold), once op `on_norm(norm)` (if given)
    has seen their global norm."""
    squares = []
    for gradient in gradients:
        with tf.colocate_with(gradient):
            squares.append(exact_math.sum_of_squares(gradient))
    norm = exact_math.sqrt(tf.add_n(squares))
    with tf.control_dependencies([on_norm(norm)] if on_norm else []):
        scale = exact_ops.quotient(threshold, tf.maximum(norm, threshold))
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
        gradients, variables = zip_strict(*grads_and_vars)
        clipped = clip_by_global_norm(list(gradients), self._threshold, self._on_norm)
        return super().apply_gradients(zip_strict(clipped, variables), global_step, name)
