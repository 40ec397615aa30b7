"""Bounded staleness (stale synchronous parallel, SSP: Ho, Cipar, Cui, Kim, Lee, Gibbons, Gibson, Ganger,
Xing, "More Effective Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013),
async mode, --max_staleness=s: a worker starts its step c only once every worker has finished c − s
steps, so the fastest is at most s steps ahead of the slowest; s = 0 is lockstep.

Blocking queues, not polling: for each ordered pair of workers (j, i) a queue on the parameter
servers holds one token per step j has finished, put there as j starts its next step. Before step
c > s, worker i takes one token from each other worker's queue to it (its (c − s)-th), which blocks
until that worker has finished c − s steps. Each worker's clock (steps finished) is a vector on the
parameter servers, and the largest gap between a worker starting a step and the slowest clock is
logged as `largest_clock_gap` (each worker keeps its own largest, the summary says the largest of them).
A resumed worker puts one token for each step it had finished, and takes as many as its starting step
needs, so the count carries over.

A clock counts steps, so every step must push and fetch (--push_every=1 --fetch_every=1): SSP's
promise is about reads, that a worker at clock c sees every update of clocks before c - s, and an
update a worker holds back or a copy it does not refresh would break it silently.
"""

import dataclasses

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.graph.devices import worker_device
from parallel_tf.training.rules import Technique

EVERY_STEP = "SSP's clocks count steps, and its read bound holds only if every step's update is pushed and read"
TECHNIQUE = Technique(
    name="bounded_staleness",
    flags=("max_staleness",),
    modes=("async",),
    hooks=("wrap",),
    requires={
        "push_every": (1, EVERY_STEP),
        "fetch_every": (1, EVERY_STEP),
        "prefetch": (False, "a worker reads after its clock's gate lets it through, not before"),
    },
    conflicts={
        "softsync": "softsync holds pushes in a queue until floor(N/n) are in, so a read can miss updates of "
        "clocks SSP says it sees",
        "easgd": "EASGD's workers push no updates to read, only exchange every --easgd_period steps",
    },
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_integer(
        "max_staleness",
        -1,
        "async: bounded staleness (SSP, Ho et al., NIPS 2013): a worker starts step c only once every worker "
        "has finished c - s steps; 0 is lockstep. -1: unbounded (plain async).",
        lower_bound=-1,
        flag_values=flag_values,
    )


def _shared(num_workers):
    """On the parameter servers: a token queue for each ordered pair of workers, each worker's clock, and each
    worker's largest gap (a slot a worker, written by it alone: two workers' read, max and assign of one shared
    scalar could keep the smaller)."""
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
    return queues, clocks, gaps


def wrap(settings, graph):
    s, num_workers, me = settings.options.max_staleness, settings.num_workers, settings.task_index
    others = [j for j in range(num_workers) if j != me]
    queues, clocks, gaps = _shared(num_workers)
    with tf.device(worker_device(me, settings.num_gpus)):
        finished = tf.Variable(
            tf.zeros([], tf.int64), trainable=False, collections=["local_variables"], name="ssp_clock"
        )

    def tell(steps_finished, tokens):
        """Sets this worker's clock, then hands the others `tokens` more tokens each."""
        with tf.control_dependencies([tf.scatter_update(clocks, [me], [steps_finished])]):
            return tf.group(*[queues[me, i].enqueue_many(tf.zeros(tf.reshape(tokens, [1]), tf.int32)) for i in others])

    def take(tokens):
        """Blocks until every other worker has handed this one `tokens` more tokens."""
        return tf.group(*[queues[j, me].dequeue_many(tokens) for j in others])

    def then_record_gap(before):
        with tf.control_dependencies([before]):
            # read_value(): the variables' own read ops have no dependencies, and could read before `before`
            gap = finished.read_value() - tf.reduce_min(clocks.read_value())
            return tf.scatter_max(gaps, [me], [gap], use_locking=True)

    # The first step of this process: it has finished `start` steps (0, or where a resumed run starts).
    start = tf.cast(graph.position, tf.int64)
    with tf.control_dependencies([finished.assign(start)]):
        told_start = tell(start, tf.cast(start, tf.int32))
    with tf.control_dependencies([told_start]):
        first_gate = then_record_gap(take(tf.cast(tf.maximum(start - s, 0), tf.int32)))
    # Every later step c: the step before it has finished; take one token of each worker once c > s.
    told_one = tell(finished.assign_add(1), 1)
    tell_gate = then_record_gap(told_one)
    with tf.control_dependencies([told_one]):
        wait_gate = then_record_gap(take(1))
    started = [False]  # whether this process has run a step yet

    def plan(step):
        gate = (wait_gate if step > s else tell_gate) if started[0] else first_gate
        started[0] = True
        return [gate, *graph.runs(step)]

    # Its variables are joined as every other's (train_graph.with_join_fields): the chief initialises and
    # checkpoints them, and every worker waits for them.
    return dataclasses.replace(
        graph,
        plan=plan,
        counters={**graph.counters, "largest_clock_gap": tf.reduce_max(gaps)},
    )
