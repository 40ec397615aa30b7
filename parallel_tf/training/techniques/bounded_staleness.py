"""Bounded staleness (stale synchronous parallel, SSP: Ho, Cipar, Cui, Kim, Lee, Gibbons, Gibson, Ganger,
Xing, "More Effective Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013),
async mode, --max_staleness=s: a worker starts its step c only once every worker has finished c − s
steps, so the fastest is at most s steps ahead of the slowest; s = 0 is lockstep.

Blocking queues, not polling: for each ordered pair of workers (j, i) a queue on the parameter
servers holds one token per step j has finished, put there as j's push of that step is sent. Before
step c > s, worker i takes one token from each other worker's queue to it (its (c − s)-th), which blocks
until that worker has finished c − s steps. That gate is part of step c − 1, after its push and before
anything reads for step c (--prefetch's fetch at the step's end, or step c's own), so it runs inside a loop
of steps (--steps_per_run) as it does a run a step. Each worker's clock (steps finished) is a vector on the
parameter servers, and the largest gap between a worker passing a gate and the slowest clock is logged as
`largest_clock_gap` (each worker keeps its own largest, the summary says the largest of them). A process's
first step is gated in a run of its own: a resumed worker puts one token for each step it had finished, and
takes as many as its starting step needs, so the count carries over.

A clock counts steps, so every step must push and fetch (--push_every=1 --fetch_every=1): SSP's
promise is about reads, that a worker at clock c sees every update of clocks before c - s, and an
update a worker holds back or a copy it does not refresh would break it silently.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from parallel_tf.compat import tf
from parallel_tf.graph.model import LOCAL
from parallel_tf.graph.placement import worker_device
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph

EVERY_STEP = "SSP's clocks count steps, and its read bound holds only if every step's update is pushed and read"


class Options(Flags):
    max_staleness: int = flag(
        -1,
        "async: bounded staleness (SSP, Ho et al., NIPS 2013): a worker starts step c only once every worker "
        "has finished c - s steps; 0 is lockstep. -1: unbounded (plain async).",
        lower_bound=-1,
    )


TECHNIQUE = Technique(
    name="bounded_staleness",
    modes=("async",),
    hooks=("wrap", "after_push"),
    requires={"push_every": (1, EVERY_STEP), "fetch_every": (1, EVERY_STEP)},
    conflicts={
        "softsync": "softsync holds pushes in a queue until floor(N/n) are in, so a read can miss updates of "
        "clocks SSP says it sees",
    },
    options=Options,
)


@dataclasses.dataclass(frozen=True)
class _Clocks:
    """Worker `me`'s side of SSP's clocks and tokens."""

    me: int
    queues: dict
    clocks: Any  # TensorFlow's variables (it ships no types)
    gaps: Any
    finished: Any  # the steps this worker has finished

    def tell(self, steps_finished, tokens):
        """Sets this worker's clock, then hands the others `tokens` more tokens each."""
        with tf.control_dependencies([tf.scatter_update(self.clocks, [self.me], [steps_finished])]):
            handed = [queue.enqueue_many(tf.zeros(tf.reshape(tokens, [1]), tf.int32)) for queue in self._to_others()]
            return tf.group(*handed)

    def gate(self, tokens):
        """Blocks until every other worker has handed this one `tokens` more tokens; then records the gap between
        this worker's clock and the slowest."""
        with tf.control_dependencies([tf.group(*[queue.dequeue_many(tokens) for queue in self._from_others()])]):
            # read_value(): the variables' own read ops have no dependencies, and could read before the take
            gap = self.finished.read_value() - tf.reduce_min(self.clocks.read_value())
            return tf.scatter_max(self.gaps, [self.me], [gap], use_locking=True)

    def _to_others(self):
        return [queue for (j, _), queue in sorted(self.queues.items()) if j == self.me]

    def _from_others(self):
        return [queue for (_, i), queue in sorted(self.queues.items()) if i == self.me]


class BoundedStaleness(OfOneGraph):
    """SSP's hooks on one graph, sharing its clocks: `after_push` and `wrap` are called apart, and whichever comes
    first makes them."""

    def __init__(self) -> None:
        self._clocks: _Clocks | None = None

    def after_push(self, settings, read_step):
        """Once a step's push is sent: its clock told, then the gate of the next step (after the last, a step that
        never comes: every worker tells a token each step, so the ones it waits for come as the others finish)."""
        s, ssp = settings.options.max_staleness, self._shared(settings)
        finished = ssp.finished.assign_add(1)  # the next step's index
        with tf.control_dependencies([ssp.tell(finished, 1)]):
            return [ssp.gate(tf.cast(finished > s, tf.int32))]

    def wrap(self, settings, graph):
        """The gate of a process's first step, a run before its first read: its clock and tokens where it starts."""
        s, ssp = settings.options.max_staleness, self._shared(settings)
        start = tf.cast(graph.position, tf.int64)  # 0, or where a resumed run starts
        with tf.control_dependencies([ssp.finished.assign(start)]):
            told = ssp.tell(start, tf.cast(start, tf.int32))
        with tf.control_dependencies([told]):
            first_gate = ssp.gate(tf.cast(tf.maximum(start - s, 0), tf.int32))
        started = [False]  # whether this process has run a step yet

        def plan(step):
            first, started[0] = not started[0], True
            return [first_gate] * first + graph.runs(step)

        # Its variables are joined as every other's (train_graph.with_join_fields): the chief initialises and
        # checkpoints them, and every worker waits for them.
        return dataclasses.replace(
            graph,
            plan=plan,
            counters={**graph.counters, "largest_clock_gap": tf.reduce_max(ssp.gaps)},
        )

    def _shared(self, settings):
        """SSP's state, made once a graph, outside any loop of steps: on the parameter servers a token queue for each
        ordered pair of workers, each worker's clock, and each worker's largest gap (a slot a worker, written by it
        alone: two workers' read, max and assign of one shared scalar could keep the smaller); on the worker its own
        clock."""
        if self._clocks is not None:
            return self._clocks
        num_workers = settings.num_workers
        with tf.init_scope(), tf.variable_scope(tf.VariableScope(reuse=False), auxiliary_name_scope=False):
            with tf.device(tf.train.get_global_step().device):
                queues = {
                    (j, i): tf.FIFOQueue(-1, [tf.int32], [[]], shared_name=f"parallel_tf_ssp_tokens_{j}_to_{i}")
                    for j in range(num_workers)
                    for i in range(num_workers)
                    if i != j
                }
                clocks, gaps = [
                    tf.get_variable(name, [num_workers], tf.int64, tf.zeros_initializer(), trainable=False)
                    for name in ("ssp_clocks", "ssp_largest_clock_gaps")
                ]
            with tf.device(worker_device(settings.task_index, settings.num_gpus)):
                finished = tf.Variable(tf.zeros([], tf.int64), trainable=False, collections=LOCAL, name="ssp_clock")
        self._clocks = _Clocks(settings.task_index, queues, clocks, gaps, finished)
        return self._clocks


HOOKS = BoundedStaleness()
