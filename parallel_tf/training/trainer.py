"""The one training loop, whatever the mode: join the cluster, run the steps, log, checkpoint, summarise.

A `Trainer` owns the worker's graph and session and everything the chief writes. It knows its mode
only through the `TrainGraph` its mode builds (`build_graph`, train_graph.py): what to feed and run
each step, where to start, what to initialise while joining, what to run in the background and
before evaluating, which counters to log. Give it a server's target, or "" for one plain process.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np
from absl import logging

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.data.sharding import GlobalBatchSharder
from parallel_tf.errors import TaskFailure
from parallel_tf.graph import placement, products
from parallel_tf.graph.barrier import gather_at_chief, signal_done
from parallel_tf.graph.model import build_held_out, seed_everything, trainable_shapes
from parallel_tf.training import cpu_steal, logdir, modes, outputs, profiling, run_check, run_summary, session, traffic
from parallel_tf.training.checkpoints import Checkpoints
from parallel_tf.training.op_check import OpCheck
from parallel_tf.training.options import link
from parallel_tf.training.seams import OfOneGraph
from parallel_tf.training.train_graph import with_join_fields

if TYPE_CHECKING:
    from parallel_tf.training.settings import Settings


def build_graph(recipe, dataset, settings: Settings):
    """The graph a worker of `settings` trains with: its mode's (or that of the technique that builds the mode's
    graph itself: at most one, rules.py), wrapped by every technique's `wrap` hook in the order of TECHNIQUES,
    innermost first, then given the join fields nothing set. Its hooks are this graph's own (_for_one_graph)."""
    settings = dataclasses.replace(settings, hooks=_for_one_graph(settings.hooks))
    with products.gpu_kernels(settings.num_gpus > 0):
        built_by = settings.hooks.build  # at most one (rules.py)
        graph = (
            built_by[0].build(settings, recipe, dataset)
            if built_by
            else modes.BY_NAME[settings.mode].build(recipe, dataset, settings)
        )
        for technique in settings.hooks.wrap:
            graph = technique.wrap(settings, graph)
    return with_join_fields(graph)


def _for_one_graph(hooks):
    """`hooks` (seams.Hooks) as one graph's build calls them: each seams.OfOneGraph replaced by a fresh one of its
    class, the same in every seam it fills, so no graph state crosses graphs."""
    seams = vars(hooks)  # {seam: its hooks}, read without asking for any seam's (tests/test_modes.py counts those)
    fresh = {type(hook): type(hook)() for each in seams.values() for hook in each if isinstance(hook, OfOneGraph)}
    return dataclasses.replace(hooks, **{s: tuple(fresh.get(type(h), h) for h in each) for s, each in seams.items()})


class Trainer:
    """Builds this worker's graph for `settings.mode` on construction; `run()` trains and returns the
    chief's summary (None on other workers)."""

    def __init__(self, recipe, dataset, settings, target=""):
        compat.pin_before_loading(settings.intra_op_threads, settings.kernels)  # refused where TF loaded otherwise
        self.recipe, self.dataset, self.settings, self.target = recipe, dataset, settings, target
        self._diverged = self._rejoined = False
        self.session_runs = 0  # the training runs this process made: with --steps_per_run, one per k steps
        self.train_started = None  # wall time of the first step this process trains
        self.pauses = 0  # a straggler's pauses before its steps (--worker_delay_ms)
        self.traffic = traffic.Meter(("worker", settings.task_index) if settings.cluster else None)
        self.tracer = profiling.StepTracer(settings.trace_steps if settings.is_chief else None, settings.logdir)
        self.op_check = OpCheck(compat.kernels(settings.kernels) == "portable" and not settings.num_gpus)
        self.sharder = GlobalBatchSharder(
            len(dataset.train_x), settings.global_batch_size, settings.num_workers, settings.seed
        )
        cluster, task_index = settings.cluster, settings.task_index
        if run_check.needs_model_shapes(settings):  # as the launcher's check did, where it knew the data's shape
            run_check.check_model(settings, trainable_shapes(recipe, dataset.feature_shape, dataset.num_classes))
        self.graph = tf.Graph()
        with self.graph.as_default():
            seed_everything(settings.seed)
            self.train_graph = _with_learning_rate(build_graph(recipe, dataset, settings), settings)
            self.held_out = None  # built only when asked: the default graph stays what it was
            if settings.is_chief and settings.options.eval_every:
                on_worker = placement.worker_device(0, settings.num_gpus) if cluster else None
                with tf.device(on_worker), products.gpu_kernels(settings.num_gpus > 0):
                    self.held_out = build_held_out(recipe, dataset)
            self._all_trained = self._done = self.checkpoints = None
            if cluster:
                if self.train_graph.chief_waits_for_all:
                    self._all_trained = gather_at_chief(cluster.num_workers, task_index, 0.0, after=[], name="trained")
                self._done = signal_done(cluster.servers_of(task_index), task_index)
            if settings.is_chief:
                self.checkpoints = Checkpoints(settings.logdir, self.train_graph.init_variables, settings.nan_guard)
        self.graph.finalize()

    def run(self):
        settings, train_graph = self.settings, self.train_graph
        with self.graph.as_default():  # for _named_params' trainable_variables()
            started = time.time()
            # Not `with`: on a failure the task exits at once (task.py); closing waits on peers that may be gone.
            sess = self.join()
            first_step = int(sess.run(train_graph.position))
            writer = self._open_outputs(first_step) if settings.is_chief else None
            background = session.Background(train_graph.background, sess)
            with cpu_steal.Stolen() as stolen:
                train_seconds = self._train(sess, first_step, writer)
            bytes_per_step = self.traffic.mean(settings.train_steps - first_step)
            background.wait()
            if self._all_trained is not None:
                sess.run(self._all_trained)  # the chief waits here for every worker's last step
            if train_graph.after_last_step:
                train_graph.after_last_step(sess, _named_params(sess))
            self._checkpoint(sess, settings.train_steps)
            summary = None
            if writer:  # the chief's
                wall_seconds = time.time() - started
                summary = {
                    **run_summary.summarize(self, sess, train_seconds, wall_seconds, stolen.share),
                    **bytes_per_step,
                }
                named = _named_params(sess)
                summary["params_sha256"] = outputs.params_sha256(named)
                writer.finish(summary, named)
                logging.info(
                    "done: eval_accuracy %.4f, final loss %.6f, params_sha256 %s; outputs in %s",
                    summary["eval_accuracy"],
                    summary["final_loss"],
                    summary["params_sha256"],
                    settings.logdir,
                )
            if self._done is not None:
                sess.run(self._done)
            sess.close()
            return summary

    def join(self):
        """A session on the cluster (session.join), noting whether it rejoined a running one."""
        sess, self._rejoined = session.join(self.graph, self.train_graph, self.settings, self.checkpoints, self.target)
        return sess

    def _open_outputs(self, first_step):
        settings = self.settings
        logdir.record_run(settings.logdir, logdir.run_identity(self.recipe.name, settings))
        if self._rejoined:
            logging.info("rejoined the running cluster at step %d/%d", first_step, settings.train_steps)
        elif self.checkpoints and self.checkpoints.latest:
            logging.info("resuming from %s at step %d/%d", self.checkpoints.latest, first_step, settings.train_steps)
        return outputs.RunWriter(settings.logdir, self.graph, first_step)

    def _batch(self, step, positions):
        """(images, labels) of this worker's slice of global batch `step`."""
        settings = self.settings
        rows = self.sharder.shard(step, settings.task_index)
        images = self.dataset.train_x[rows]
        if self.recipe.augment:
            images = self.recipe.augment(images, step, positions, settings)
        return images, self.dataset.train_y[rows]

    def _feed(self, steps, positions):
        """What a run of `steps` (a range) is fed: their batches, stacked, and what the graph asks for besides."""
        batches = self.train_graph.steps.feed([self._batch(step, positions) for step in steps])
        return {**batches, **self.train_graph.feed(steps[0])}

    def _train(self, sess, first_step, writer):
        """Runs steps first_step..train_steps-1; the chief logs and checkpoints; returns the seconds spent.

        A step normally follows the last, but a graph may say otherwise (backup workers skip steps
        applied without them), so logging and checkpoints happen when a multiple of their interval
        is reached or passed.
        """
        settings, train_graph = self.settings, self.train_graph
        positions = self.sharder.positions(settings.task_index)
        started = interval_start = self.train_started = time.time()
        interval_steps = 0
        step = first_step
        while step < settings.train_steps:
            if train_graph.pause_before_step:
                time.sleep(train_graph.pause_before_step)
                self.pauses += 1
            steps = range(step, min(train_graph.run_end(step), settings.train_steps))
            feed = self._feed(steps, positions)
            runs = train_graph.runs(step)
            for part, fetches in enumerate(runs):
                if self.tracer.wants(step):
                    result, spent = self.tracer.run(sess, step, fetches, feed, part)
                    logging.info("%s", spent)
                else:
                    result = self.op_check.run(sess, fetches, feed)
                self.traffic.count(fetches, len(steps) if part == len(runs) - 1 else 1)  # a loop is the last part
                self.session_runs += 1
            done = min(train_graph.next_step(step, result), settings.train_steps)
            if step == first_step and settings.options.link_rate and settings.is_chief:
                link.say_what_it_costs(self.traffic.mean(done - step), settings.options.link_rate, settings.train_steps)
            if not np.isfinite(result["losses"]).all():
                self._diverged_at(done, result["losses"], len(steps))
            interval_steps += done - step
            last = done == settings.train_steps
            evaluating = self.held_out is not None and (_reached(step, done, settings.options.eval_every) or last)
            if writer and (evaluating or _reached(step, done, settings.log_every) or last):
                now = time.time()
                rate = interval_steps * settings.global_batch_size / max(now - interval_start, 1e-9)
                held_out = self._evaluate(sess) if evaluating else {}
                self._log(
                    writer, sess, done, _batch_loss(result), rate, self.traffic.per_step(interval_steps), held_out
                )
                interval_start, interval_steps = now, 0
            if writer and settings.snapshot_every and _reached(step, done, settings.snapshot_every):
                writer.snapshot(done, _named_params(sess))
            if _reached(step, done, settings.checkpoint_every) and done < settings.train_steps:
                self._checkpoint(sess, done)
            step = done
        return time.time() - started

    def _checkpoint(self, sess, done):
        """After step `done`: every worker copies the state it keeps for itself (the graph's stash), and the
        chief, once all have, saves the checkpoint."""
        if self.train_graph.stash:
            sess.run(self.train_graph.stash.copy)
        if self.checkpoints:
            self.checkpoints.save(sess, done)

    def _evaluate(self, sess):
        """The held-out loss and accuracy of the parameters as they are now (--eval_every)."""
        model, dataset = self.held_out, self.dataset
        assert model is not None, "built where there are evaluations"
        feed = {model.features: dataset.eval_x, model.labels: dataset.eval_y}
        loss, accuracy = sess.run([model.loss, model.accuracy], feed)
        return {"eval_loss": float(loss), "eval_accuracy": float(accuracy)}

    def _log(self, writer, sess, step, loss, rate, bytes_per_step, held_out):
        counts = run_summary.counters(sess, self.train_graph)
        writer.log_step(step, loss, rate, **bytes_per_step, **held_out, **counts)
        logging.info(
            "step %d/%d  loss %.6f  %.0f examples/sec%s",
            step,
            self.settings.train_steps,
            loss,
            rate,
            "".join(f"  {name} {value:.6g}" for name, value in held_out.items())
            + "".join(f"  {name} {value}" for name, value in counts.items()),
        )

    def _diverged_at(self, step, losses, steps_in_run):
        """A loss that is NaN or infinite at `step`, the last of a run of `steps_in_run` (the run reports its last
        step's losses, so it says where it saw it): with --nan_guard the run stops (exit 1), before any
        checkpoint of what follows; without, it says so once and goes on, as asked."""
        loss = losses[~np.isfinite(losses)][0]
        at = (
            f"step {step}"
            if steps_in_run == 1
            else f"step {step}, the last of a run of {steps_in_run} (--steps_per_run)"
        )
        if self.settings.nan_guard:
            kept = f"; {self.checkpoints.kept()}" if self.checkpoints else ""
            raise TaskFailure(
                f"the loss is {loss} at {at}: training diverged, so --nan_guard stopped it{kept} "
                f"({_what_may_help(self.settings)}; --nonan_guard trains on)"
            )
        if not self._diverged:
            self._diverged = True
            logging.warning("the loss is %s at %s: training has diverged (%s)", loss, at, _what_may_help(self.settings))


def _with_learning_rate(train_graph, settings):
    """`train_graph` logging the learning rate its schedule gives at the global step (`scheduled_rate`), where
    there is a schedule or the linear scaling rule: the rate the next update is applied at."""
    if settings.schedule.is_constant and not settings.options.linear_scaling_batch:
        return train_graph
    rate = tf.convert_to_tensor(settings.schedule.at(tf.train.get_global_step()), tf.float32)
    return dataclasses.replace(train_graph, counters={**train_graph.counters, "scheduled_rate": rate})


def _reached(before, after, interval):
    """True if going from step `before` to `after` reaches or passes a multiple of `interval` (0: never)."""
    return bool(interval) and after // interval > before // interval


def _batch_loss(step_result):
    """Mean of the shard losses the chief saw this step, summed in worker order so the number is
    repeatable: the global batch's in sync mode, its group's in hierarchical, its own in async."""
    order = step_result["workers"].argsort()
    return float(step_result["losses"][order].astype("float64").mean())


def _what_may_help(settings):
    """The likely causes of a loss that stopped being finite, for its message."""
    if settings.options.allreduce_transport != "float32":
        return (
            f"a smaller --learning_rate may help, or --allreduce_transport=float32: a mean gradient above "
            f"{settings.options.allreduce_transport}'s largest value overflows it"
        )
    return "a smaller --learning_rate may help"


def _named_params(sess):
    """{name: value} of every trainable variable, a variable split over servers put together."""
    return placement.whole_values(sess, tf.trainable_variables())
