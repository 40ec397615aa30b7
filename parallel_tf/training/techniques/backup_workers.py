"""Backup workers (Chen, Pan, Monga, Bengio, Jozefowicz, "Revisiting Distributed Synchronous SGD",
2016), sync mode, --replicas_to_aggregate=R < N, with SyncReplicasOptimizer's own semantics: each
step waits for R gradients and applies the average of every gradient for that step in when the
chief takes them (at least R, at most N: TF's accumulators take all they hold, not exactly the
first R as the paper does); later ones are dropped as stale, and training goes on if up to N - R
workers other than the chief die. `gradients_applied` counts what the steps took.

No barrier (it would wait for all N): each worker runs at its own pace, its data position is the
token it was handed (the step it works on, fed back as `step`), and a gradient computed for a step
already applied is dropped by the accumulators. So that can be counted (TF issue #11660), each
gradient also sends a 1 into a summing accumulator with the same staleness rule, just before the
real ones; the chief adds what it takes from it to `gradients_applied`. The chief runs the sync op
in a thread, as TF's chief queue runner does: a chief handed a stale token must be able to compute
again while the sync op waits for R fresh gradients. Once the last step is applied it hands every
worker a last token: a worker that took a stale token takes another, so the N per step may not last.
"""

import dataclasses

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.devices import device_setter
from parallel_tf.graph.model import build_model, make_optimizer
from parallel_tf.graph.sync_replicas import sync_replicas
from parallel_tf.training.techniques.rules import Technique
from parallel_tf.training.train_graph import TrainGraph, fixed_plan, own_report

TECHNIQUE = Technique(
    name="backup_workers",
    flags=("replicas_to_aggregate",),
    modes=("sync",),
    hooks=("build", "spare_workers"),  # R of N is a protocol of its own, not a change to lockstep
    requires={
        "aggregation": ("accumulator", "the gradients in by each step are averaged in arrival order"),
        "strict_determinism": (False, "which gradients arrive first depends on timing"),
    },
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_integer(
        "replicas_to_aggregate",
        0,
        "sync: apply each step once this many workers' gradients are in (backup workers: training goes on "
        "if the others die; late gradients are dropped and counted). 0: all workers. Implies "
        "--aggregation=accumulator and gives up bitwise repeats.",
        lower_bound=0,
        flag_values=flag_values,
    )


def enabled(values, cluster):
    return 0 < values["replicas_to_aggregate"] < cluster.num_workers


def check(values, cluster):
    """R = N (or 0) is plain sync; more than N cannot be waited for."""
    replicas, num_workers = values["replicas_to_aggregate"], cluster.num_workers
    if replicas > num_workers:
        raise ConfigError(f"--replicas_to_aggregate={replicas} is more than the {num_workers} workers")


def spare_workers(options, cluster):
    """N - R: the workers whose gradients no step waits for."""
    return cluster.num_workers - options["replicas_to_aggregate"]


@dataclasses.dataclass(frozen=True)
class BackupWorkersGraph(TrainGraph):
    step_input: object = None  # fed with the step (the token) each run is for

    def feed(self, step):
        return {self.step_input: step}

    def next_step(self, step, result):
        return int(result["next_step"])  # the token handed out: steps applied without this worker are skipped


@dataclasses.dataclass(frozen=True)
class _ChiefSync:
    """The chief's background work: apply steps until the last, then hand every worker a last token."""

    sync_op: object
    finished: object
    release_all: object

    def __call__(self, sess):
        while not sess.run(self.finished):
            sess.run(self.sync_op)
        sess.run(self.release_all)


def build(recipe, dataset, settings, cluster, task_index):
    """Sync training where each step applies the gradients of at least R of N workers."""
    num_workers, replicas = cluster.num_workers, settings.options["replicas_to_aggregate"]
    is_chief = task_index == 0
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        step = tf.placeholder(tf.int64, [], name="step")
        with tf.device(global_step.device):
            counted = tf.ConditionalAccumulator(
                tf.float32, shape=[], shared_name="parallel_tf_gradients_counted", reduction_type="SUM"
            )
            sent = tf.get_variable("gradients_sent", [], tf.int64, tf.zeros_initializer(), trainable=False)
            applied = tf.get_variable("gradients_applied", [], tf.int64, tf.zeros_initializer(), trainable=False)

        def count_first(grads_and_vars):
            with tf.control_dependencies([g for g, _ in grads_and_vars]):
                count = tf.group(counted.apply_grad(1.0, local_step=step), sent.assign_add(1))
            (first_gradient, first_variable), *others = grads_and_vars
            with tf.control_dependencies([count]):
                return [(tf.identity(first_gradient), first_variable), *others]

        optimizer = make_optimizer(settings.optimizer, settings.schedule.at(global_step))
        synced = sync_replicas(optimizer, model.loss, global_step, replicas, num_workers, is_chief, None, count_first)
        # Taken in the same run as the gradients, in no order, as TF takes its per-variable accumulators.
        sync_and_count = tf.group(synced.sync_op, applied.assign_add(tf.cast(counted.take_grad(replicas), tf.int64)))
        with tf.control_dependencies([synced.train_op]):
            report = {**own_report(task_index, model.loss), "next_step": tf.identity(synced.train_op)}
    local_init = tf.group(synced.local_init_op, counted.set_global_step(global_step)) if is_chief else None
    finished = global_step >= settings.train_steps
    return BackupWorkersGraph(
        model=model,
        position=global_step,
        plan=fixed_plan(report),
        local_init_op=local_init or synced.local_init_op,
        ready_for_local_init_op=synced.ready_for_local_init_op,
        counters={
            "gradients_applied": applied,  # R a step
            "stale_gradients_dropped": sent - applied - tf.cast(counted.num_accumulated(), tf.int64),
        },
        chief_waits_for_all=False,  # some workers may be dead
        background=_ChiefSync(sync_and_count, finished, synced.optimizer.get_init_tokens_op(num_workers))
        if is_chief
        else None,
        step_input=step,
    )
