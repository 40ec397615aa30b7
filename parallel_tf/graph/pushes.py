"""Summed gradients sent to the parameter servers, and counted: Downpour's push (async mode) and a
group's exchange with the central parameter servers (hierarchical mode) are the same three steps:
apply the sum with the optimizer, zero it, count the push. Async pushes also record their staleness."""

from __future__ import annotations  # the types name TensorFlow's, which is imported on first use (compat.py)

import dataclasses
from collections.abc import Callable

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf


def push_counter(name, size):
    """An int64 vector on the parameter servers: pushes by each worker (or group), logged by the chief."""
    return tf.get_variable(name, [size], tf.int64, tf.zeros_initializer(), trainable=False)


def count_one(counter, index):
    """counter[index] + 1, under the counter's lock: every worker counts into the same vector on the parameter
    servers, and their pushes overlap (an unlocked add reads, then writes, and loses one of two)."""
    return tf.scatter_add(counter, [index], tf.constant([1], tf.int64), use_locking=True)


class GradientSum:
    """One zero-initialised variable per parameter, in `collections`, to sum gradients into between pushes."""

    def __init__(self, like, collections, name):
        self.variables = [
            tf.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False, collections=collections, name=name)
            for v in like
        ]

    def add(self, gradients):
        """The op values of the sums once `gradients` (one per variable) are added."""
        return [tf.identity(s.assign_add(g)) for s, g in zip_strict(self.variables, gradients)]

    def push(self, applied, counter, index):
        """Once `applied` (the op that hands this sum's values to the parameter servers) has run, adds 1 to
        counter[index], then zeroes the sum: on the counter's server, then here, so that one control edge
        crosses back, not one per op of `applied`."""
        with tf.colocate_with(counter), tf.control_dependencies([applied]):
            counted = count_one(counter, index)
        with tf.control_dependencies([counted]):
            return tf.group(*[s.assign(tf.zeros_like(s)) for s in self.variables])


class StalenessHistogram:
    """How stale async pushes are: σ = updates applied (the global step) at the push minus at the pusher's
    last fetch, counted per σ in an int64 vector on the parameter servers (the last bin: that or more)."""

    BINS = 64

    def __init__(self):
        self.counts = tf.get_variable(
            "staleness_histogram", [self.BINS], tf.int64, tf.zeros_initializer(), trainable=False
        )

    def record(self, staleness):
        with tf.colocate_with(self.counts):  # next to the counts, where the staleness is computed
            return count_one(self.counts, tf.minimum(staleness, self.BINS - 1))

    def nonzero(self):
        """[[σ, pushes], ...] for every σ seen: what the chief logs and summarises."""
        seen = tf.where(self.counts > 0)
        return tf.concat([seen, tf.expand_dims(tf.gather_nd(self.counts, seen), 1)], axis=1)


@dataclasses.dataclass(frozen=True)
class Send:
    """How an async push reaches the parameters: `op` runs in the pushing worker's step; a technique
    that applies pushes later also gives the chief work to do on joining and in the background."""

    op: tf.Operation
    chief_on_join: Callable[[tf.Session], None] | None = None
    chief_background: Callable[[tf.Session], None] | None = None
