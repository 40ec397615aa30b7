"""The chief's summary of a run (summary.json): its results, and what they depend on besides the flags."""

import os

from absl import logging

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.graph import products
from parallel_tf.training import devices

STEAL_TO_WARN = 0.05  # a twentieth of a CPU's time taken: the times and a link's rate that much off


def counters(sess, train_graph):
    """The graph's counters (e.g. updates by each async worker) as plain lists for JSON."""
    if not train_graph.counters:
        return {}
    return {name: value.tolist() for name, value in sess.run(train_graph.counters).items()}


def warn_of_steal(cpu_steal):
    """Says a share of a CPU's time taken by the hypervisor above STEAL_TO_WARN, in one line."""
    if cpu_steal is not None and cpu_steal > STEAL_TO_WARN:
        logging.warning(
            "the hypervisor took %.0f%% of a CPU's time while this run trained (cpu_steal in summary.json): its "
            "times are slower than the machine's own, and a shaped link carried about that much less than its "
            'rate (docs/launching.md, "Links")',
            100 * cpu_steal,
        )


def summarize(trainer, sess, train_seconds, wall_seconds, cpu_steal):
    """The run's results. final_loss is the final parameters' loss on the last global batch, in one
    pass by the chief, so it compares models across worker counts without summation order. `cpu_steal`: the
    largest share of a CPU's time the hypervisor took while the chief trained (cpu_steal.py), or None; above
    STEAL_TO_WARN it is said, as the times and a shaped link's rate are then not this machine's."""
    warn_of_steal(cpu_steal)
    settings, dataset, train_graph = trainer.settings, trainer.dataset, trainer.train_graph
    model = train_graph.model
    train_graph.before_evaluation(sess)
    eval_accuracy = sess.run(model.accuracy, {model.features: dataset.eval_x, model.labels: dataset.eval_y})
    rows = trainer.sharder.global_batch(settings.train_steps - 1)
    final_loss = sess.run(model.loss, {model.features: dataset.train_x[rows], model.labels: dataset.train_y[rows]})
    steps = settings.train_steps
    return {
        "recipe": trainer.recipe.name,
        "dataset": dataset.name,
        "mode": settings.mode,
        "num_workers": settings.num_workers,
        "num_ps": settings.cluster.num_ps if settings.cluster else 0,
        "variables_split_over": model.split_over,  # pieces; 0: whole variables placed
        "num_gpus": settings.num_gpus,
        # what TensorFlow's GPU kernels were asked for; on CPUs it changes nothing
        devices.DETERMINISTIC_OPS: os.environ.get(devices.DETERMINISTIC_OPS, ""),
        "global_batch_size": settings.global_batch_size,
        "train_steps": steps,
        "learning_rate": settings.learning_rate,
        "optimizer": settings.optimizer,
        "seed": settings.seed,
        "final_loss": float(final_loss),
        "eval_accuracy": float(eval_accuracy),
        "examples_per_sec": steps * settings.global_batch_size / train_seconds,
        "ms_per_step": 1000.0 * train_seconds / steps,
        "wall_seconds": wall_seconds,
        "cpu_steal": cpu_steal,
        "train_started": trainer.train_started,  # wall time of this process's first step (a study's clock starts here)
        "tf_version": tf.VERSION,
        # what the bits depend on besides the flags, and which of our kernels ran (not one of them)
        "kernels": {**compat.kernel_path(), **products.portable_kernel_chosen()},
        "techniques": list(settings.techniques),  # what ran, as check_run decided
        "declared": settings.declared(),  # every technique and option on, and what it did
        "session_runs": trainer.session_runs,
        **({"one_step_a_run": settings.one_step_a_run} if settings.one_step_a_run else {}),
        **({"straggler_pauses": trainer.pauses} if train_graph.pause_before_step else {}),
        # the updates applied: the clock a schedule runs in (async: pushes, or softsync's updates)
        "global_step": int(sess.run(tf.train.get_global_step())),
        **settings.arithmetic_options(),
        **counters(sess, train_graph),
    }
