"""Backup workers (Chen, Pan, Monga, Bengio, Jozefowicz, "Revisiting Distributed Synchronous SGD",
2016), sync mode, --replicas_to_aggregate=R < N: each step applies the mean of the first R gradients
computed for it by R distinct workers; the other workers' gradients for that step are dropped and
counted, and training goes on if up to N − R workers other than the chief die.

The protocol, on the parameter server of the global step:
- A worker works on the step its token names (at first, where the run starts): it computes its shard's
  gradient at the parameters as they are, writes it into its own row of each variable's gradient slots
  (next to the variable, as ordered aggregation does), sends (its index, the step) to the arrivals
  queue, and waits on a release queue of its own for the next token. Holding several tokens (it was
  slow), it takes them all and works on the latest, skipping the steps applied without it.
- The chief's background thread takes arrivals one at a time: the first R from distinct workers for
  the step it is on are chosen, an arrival for an earlier step is stale. In one run it then applies
  the mean of the chosen rows, summed in worker order by the fixed tree (graph/aggregation.py), bumps
  the global step, and hands every worker the next step's token.
So a worker pushes at most once a step, and a step never waits for more than R. TensorFlow's
SyncReplicasOptimizer, which this replaced, did neither: its accumulators take every gradient in when
the chief takes them (R or more), and its one shared token queue let a fast worker take a dead or
slow worker's token and push the same shard's gradient at the same parameters again, so a step could
apply one worker's gradient twice (R = 2 of 3, one dead: ½(x − w)² trained elsewhere).

It calls the mode's hooks (compression's `transmit` encodes what a worker writes; clipping's
`optimizer` clips the chosen mean). Counters: `gradients_applied_by_worker` (at most one a step
each), `gradients_applied` (R a step) and `stale_gradients_dropped` (sent but not applied).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.aggregation import SlotAggregator
from parallel_tf.graph.model import build_model, worker_gradients
from parallel_tf.graph.optimizers import optimizer_at
from parallel_tf.graph.placement import device_setter, worker_device
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.train_graph import StepReport, TrainGraph, once, own_report

if TYPE_CHECKING:
    from parallel_tf.training.settings import Settings


def check(values, cluster):
    """R = N (or 0) is plain sync; more than N cannot be waited for."""
    replicas, num_workers = values["replicas_to_aggregate"], cluster.num_workers
    if replicas > num_workers:
        raise ConfigError(f"--replicas_to_aggregate={replicas} is more than the {num_workers} workers")


class Options(Flags):
    replicas_to_aggregate: int = flag(
        0,
        "sync: backup workers (Chen et al. 2016): apply each step once this many workers' gradients for it are "
        "in, the first from distinct workers; later ones are dropped and counted, and training goes on if the "
        "others die. 0: all workers. Gives up bitwise repeats.",
        lower_bound=0,
    )


TECHNIQUE = Technique(
    name="backup_workers",
    modes=("sync",),
    enabled=lambda values, cluster: 0 < values["replicas_to_aggregate"] < cluster.num_workers,
    check=check,
    spare_workers=lambda values, cluster: cluster.num_workers - values["replicas_to_aggregate"],  # N - R
    hooks=("build",),  # R of N is a protocol of its own, not a change to lockstep
    calls=("transmit", "optimizer"),
    requires={
        "aggregation": ("ordered", "each step sums its first R gradients in worker order, by the fixed tree"),
        "strict_determinism": (False, "which gradients arrive first depends on timing"),
    },
    conflicts={"steps_per_run": "the chief picks each step's first R gradients as they arrive, in Python between runs"},
    options=Options,
)


@dataclasses.dataclass(frozen=True)
class BackupWorkersGraph(TrainGraph):
    step_input: object = None  # fed with the step (the token) each run is for

    def feed(self, step):
        return {self.step_input: step}

    def next_step(self, step, result):
        return int(result["next_step"])  # the latest token handed out: steps applied without this worker are skipped


@dataclasses.dataclass(frozen=True)
class _ChiefAggregator:
    """The chief's background work: for each step, the first R arrivals of distinct workers for it, applied."""

    next_arrival: object  # (worker, step) of the next gradient written
    apply_and_release: object  # applies the rows of `chosen`, then hands out the next step's token
    chosen: object  # int32[R] placeholder: the chosen workers, in worker order
    global_step: object
    replicas: int
    train_steps: int

    def __call__(self, sess):
        step = int(sess.run(self.global_step))
        while step < self.train_steps:
            chosen: set[int] = set()
            while len(chosen) < self.replicas:
                worker, at = sess.run(self.next_arrival)
                if at == step:  # else stale: computed for a step already applied
                    chosen.add(int(worker))
            sess.run(self.apply_and_release, {self.chosen: sorted(chosen)})
            step += 1


def _queues(num_workers):
    """The arrivals queue, (worker, step) of each gradient written, and every worker's queue of release tokens:
    shared by name, so every worker's graph makes the same ones."""
    arrivals = tf.FIFOQueue(-1, [tf.int32, tf.int64], [[], []], shared_name="parallel_tf_backup_arrivals")
    releases = [
        tf.FIFOQueue(-1, [tf.int64], [[]], shared_name=f"parallel_tf_backup_release_{w}") for w in range(num_workers)
    ]
    return arrivals, releases


def build(settings: Settings, recipe, dataset):
    """Sync training where each step applies the gradients of the first R of N workers to deliver one."""
    cluster, task_index = settings.cluster, settings.task_index
    num_workers, replicas = settings.num_workers, settings.options.replicas_to_aggregate
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        step = tf.placeholder(tf.int64, [], name="step")
        slots = SlotAggregator(tf.trainable_variables(), num_workers)  # one row per worker
        (gradients,) = worker_gradients(recipe, model, 1, slots.variables)
        for sender in settings.hooks.transmit:  # at most one (SEAMS): a technique encodes them on the way
            gradients = sender.transmit(settings, gradients, slots.variables, on_worker, settings.random_stream)
        write = slots.write(task_index, [gradients])
        with tf.device(global_step.device):
            arrivals, releases = _queues(num_workers)
            sent = tf.get_variable("gradients_sent", [], tf.int64, tf.zeros_initializer(), trainable=False)
            applied = tf.get_variable(
                "gradients_applied_by_worker", [num_workers], tf.int64, tf.zeros_initializer(), trainable=False
            )
            with tf.control_dependencies([write]):
                arrived = tf.group(arrivals.enqueue((task_index, step)), sent.assign_add(1, use_locking=True))
            mine = releases[task_index]
            with tf.control_dependencies([arrived]):
                first = mine.dequeue()
            with tf.control_dependencies([first]):  # tokens waiting besides: this worker fell behind
                later = mine.dequeue_many(mine.size())
            next_step = tf.reduce_max(tf.concat([[first], later], axis=0))
            next_arrival = arrivals.dequeue()
            chosen = tf.placeholder(tf.int32, [replicas], name="chosen_workers")
        rate = settings.schedule.at(global_step)
        optimizer = optimizer_at(settings.optimizer, rate, global_step)
        for technique in settings.hooks.optimizer:
            optimizer = technique.optimizer(settings, optimizer)
        update = slots.apply(optimizer, global_step, [], chosen)
        with tf.colocate_with(global_step), tf.control_dependencies([update]):
            counted = tf.scatter_add(applied, chosen, tf.ones([replicas], tf.int64))
            token = global_step.read_value()
            apply_and_release = tf.group(counted, *[release.enqueue(token) for release in releases])
        report = StepReport(**own_report(task_index, model.loss), next_step=next_step)
    aggregator = None
    if task_index == 0:
        aggregator = _ChiefAggregator(
            next_arrival, apply_and_release, chosen, global_step, replicas, settings.train_steps
        )
    applied_in_all = tf.reduce_sum(applied)
    return BackupWorkersGraph(
        model=model,
        position=global_step,
        steps=once(model, report),
        counters={
            "gradients_applied": applied_in_all,  # R a step
            "gradients_applied_by_worker": applied,  # at most one a step each
            "stale_gradients_dropped": sent - applied_in_all,
        },
        chief_waits_for_all=False,  # some workers may be dead
        background=aggregator,
        step_input=step,
    )
