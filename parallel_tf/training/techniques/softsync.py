"""n-softsync (Zhang, Gupta, Lian, Liu, "Staleness-aware Async-SGD for Distributed Deep Learning",
IJCAI 2016), async mode, --softsync=n: the parameters take an update once c = ⌊N/n⌋ pushes are in,
the average of those c, and every push is applied, however late (backup workers drop late ones).
1-softsync waits for all N, N-softsync applies each push (plain async). (The notes this project
started from describe n the other way round; this follows the paper.) The average is applied at
the rate a push of staleness n gets (`optimizer_at`, the run's optimizer at its push_learning_rate):
α/n with --staleness_aware, as in the paper, else α.

Pushes wait in one FIFO queue on the parameter server of the global step; the chief takes them c at
a time in a background thread and applies their mean. The queue holds one update's c pushes: a
worker whose push finds it full waits until the chief has taken them. Unbounded, the queue grew
whenever the chief's applies ran slower than the pushes came, and every push read parameters missing
the whole backlog: with --staleness_aware (whose rate the chief's apply computed on worker 0, a
crossing per update) the digits MLP, 2 workers, 2-softsync, diverged (loss 69.6 after 300 steps,
where softsync alone at α/2 ends at 0.21; bounded: 0.21). The rate of an update is computed on the
parameter server, beside the global step it reads. Every worker pushes ⌈train_steps/push_every⌉
times: the push that makes the run's count closes the queue, and the chief's last update averages
what is left (fewer than c when c does not divide the pushes). A push waiting in the queue when the
cluster is killed is lost. `softsync_pushes` counts the pushes queued.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.optimizers import apply_then_step
from parallel_tf.graph.pushes import Send
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph


def check(values, cluster):
    n, num_workers = values["softsync"], cluster.num_workers
    if n > num_workers:
        raise ConfigError(f"--softsync={n} is more than the {num_workers} workers: n-softsync takes floor(N/n) pushes")


class Options(Flags):
    softsync: int = flag(
        0,
        "async: n-softsync (Zhang et al., IJCAI 2016): apply the average of every floor(N/n) pushes, late ones "
        "included; 1 waits for all N workers, N applies each push. 0: off.",
        lower_bound=0,
    )


TECHNIQUE = Technique(name="softsync", modes=("async",), options=Options, check=check, hooks=("send_push", "wrap"))


class Softsync(OfOneGraph):
    """Softsync's hooks on one graph, sharing the count of the pushes made."""

    def __init__(self) -> None:
        self._made: Any = None  # the count, a TensorFlow variable once the push is built

    def send_push(self, settings, optimizer, sums, parameters, global_step, after, optimizer_at):
        n, num_workers = settings.options.softsync, settings.num_workers
        pushes_in_a_run = num_workers * math.ceil(settings.train_steps / settings.options.push_every)
        per_update = num_workers // n
        with tf.device(global_step.device):
            with tf.init_scope():  # the queue and the chief's part outside a loop of steps (train_graph.drive)
                queue = tf.FIFOQueue(
                    per_update,
                    [s.dtype for s in sums],
                    [s.shape for s in sums],
                    shared_name="parallel_tf_softsync_pushes",
                )
                made = self._made = tf.get_variable(
                    "softsync_pushes", [], tf.int64, tf.zeros_initializer(), trainable=False, use_resource=True
                )
                count_push = _push_counter(made)
                close_if_all_made = tf.cond(made >= pushes_in_a_run, queue.close, tf.no_op)  # a resume after the last
                means = [tf.reduce_mean(pushes, axis=0) for pushes in _as_list(queue.dequeue_up_to(per_update))]
                with tf.control_dependencies(means):  # the rate (and a technique's count of it) once there are pushes
                    optimizer = optimizer_at(tf.constant(n, tf.int64))
                apply = apply_then_step(optimizer, zip_strict(means, parameters), global_step)
            with tf.control_dependencies([after]):
                enqueue = queue.enqueue(sums)
            with tf.control_dependencies([enqueue]):  # every worker's: one lost, and the queue never closes
                count = count_push()
            push = tf.cond(tf.equal(count, pushes_in_a_run), queue.close, tf.no_op)  # the run's last push: exactly one
        return Send(
            push,
            chief_on_join=lambda sess: sess.run(close_if_all_made),
            chief_background=functools.partial(_apply, apply),
        )

    def wrap(self, settings, graph):
        """Logs `softsync_pushes`."""
        return graph.counting({"softsync_pushes": self._made} if self._made is not None else {})


HOOKS = Softsync()


def _push_counter(made):
    """() -> the op that adds a push to `made` and gives the count that makes, one push at a time (a critical section
    on the server), so each push reads a count of its own. assign_add's own value is read after its add, where the
    add of a push made at the same moment may land first: two pushes each read the run's last count, and the second
    to close the queue failed its worker ("already closed"; seen once under load, in a 4-step pair test)."""
    counting = tf.CriticalSection(shared_name="parallel_tf_softsync_count")

    def counted():
        with tf.control_dependencies([made.assign_add(1, read_value=False)]):
            return made.read_value()

    return lambda: counting.execute(counted)


def _as_list(dequeued):
    return dequeued if isinstance(dequeued, list) else [dequeued]


def _apply(apply, sess):
    """The chief's background: apply the mean of the next c pushes (fewer once the queue is closed) until
    the closed queue is empty."""
    while True:
        try:
            sess.run(apply)
        except tf.errors.OutOfRangeError:
            return
