"""Staleness-aware learning rate (Zhang, Gupta, Lian, Liu, "Staleness-aware Async-SGD for Distributed
Deep Learning", IJCAI 2016), async mode, --staleness_aware: a push of staleness σ (updates applied
since the pusher's fetch, which async mode measures for every push) is applied with learning rate
α / max(σ, 1), so a gradient computed on old parameters moves them less. σ counts only the updates
the worker's copy is missing (async mode's docstring says how). `staleness_aware_pushes` counts the
updates applied at such a rate (with softsync, its averaged updates, at σ = n).
"""

from __future__ import annotations

from typing import Any

from parallel_tf.compat import tf
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph


class Options(Flags):
    staleness_aware: bool = flag(
        False,
        "async: apply each push with learning rate / max(staleness, 1), staleness being the updates applied "
        "since the pushing worker fetched (Zhang et al., IJCAI 2016).",
    )


TECHNIQUE = Technique(
    name="staleness_aware",
    effect="staleness_aware_pushes",
    modes=("async",),
    hooks=("push_learning_rate", "wrap"),
    options=Options,
)


class StalenessAware(OfOneGraph):
    """The rate's hooks on one graph, sharing the count of the pushes applied at it."""

    def __init__(self) -> None:
        self._scaled: Any = None  # the count, a TensorFlow variable once a rate is built

    def push_learning_rate(self, settings, learning_rate, staleness):
        """The rate a push of `staleness` (an int64 tensor) is applied with, counted each time it is used."""
        if self._scaled is None:  # one count, however many rates use it, made outside a loop of steps (drive)
            with tf.init_scope(), tf.variable_scope("staleness_aware"):
                self._scaled = tf.get_variable("pushes", [], tf.int64, tf.zeros_initializer(), trainable=False)
        with tf.control_dependencies([self._scaled.assign_add(1, use_locking=True)]):  # every worker's pushes count
            return learning_rate / tf.cast(tf.maximum(staleness, 1), tf.float32)

    def wrap(self, settings, graph):
        """Logs `staleness_aware_pushes`, where the graph applies pushes."""
        return graph.counting({"staleness_aware_pushes": self._scaled} if self._scaled is not None else {})


HOOKS = StalenessAware()
