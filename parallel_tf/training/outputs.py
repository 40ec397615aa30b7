"""What the chief writes in --logdir, and the parameter fingerprint reproducibility is judged by.

metrics.jsonl    one line per logged step: step, loss, examples_per_sec, wall_time, the mode's counters, and
                 with --eval_every eval_loss and eval_accuracy (the parameters on the held-out split)
events.*         TensorBoard: loss, examples_per_sec, eval_accuracy (and eval_loss), the mode's counters (one per
                 worker or group as <name>/<i>, e.g. updates_by_worker/1), and its *_histogram counters
                 ([[value, count], ...], e.g. async staleness) as histograms; a resume purges what came after
                 its checkpoint, as metrics.jsonl does
run.json         what defines the run (recipe, seed, batch, ...): a resume must match it
model.ckpt-*     checkpoints every --checkpoint_every steps and at the end (see checkpoints.py)
params.npz       final trainable parameters by name, for comparing runs
params_at/       with --snapshot_every, the parameters at those steps (<step>.npz), as params.npz
summary.json     the run's settings and results, params_sha256 among them
"""

import hashlib
import json
import os
import time

import numpy as np

from parallel_tf.backports import removesuffix
from parallel_tf.compat import tf
from parallel_tf.files import write_atomically, written_atomically


def params_sha256(named_params):
    """SHA-256 of every parameter's bytes, in name order: equal iff the parameters are bitwise equal."""
    digest = hashlib.sha256()
    for name in sorted(named_params):
        digest.update(np.ascontiguousarray(named_params[name]).tobytes())
    return digest.hexdigest()


SNAPSHOTS = "params_at"


class RunWriter:
    """The chief's outputs: metrics lines as they happen, then the final summary."""

    def __init__(self, logdir, graph, first_step=0):
        self.logdir = logdir
        self._metrics_path = os.path.join(logdir, "metrics.jsonl")
        self._drop_metrics_after(first_step)
        # a file of its own on a resume: the name is the time in seconds, which a quick restart may share
        suffix = f".resumed-{first_step}" if first_step else None
        self._events = tf.summary.FileWriter(logdir, graph, filename_suffix=suffix)
        if first_step:  # TensorBoard drops what the interrupted run logged after the checkpoint, from here on
            self._events.add_session_log(tf.SessionLog(status=tf.SessionLog.START), first_step + 1)

    def _drop_metrics_after(self, step):
        """On a resume, the lines of steps after the checkpoint describe training that is being redone."""
        if not os.path.exists(self._metrics_path):
            return
        with open(self._metrics_path, encoding="utf-8") as f:
            kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
        write_atomically(self._metrics_path, "".join(kept))

    def log_step(self, step, loss, examples_per_sec, **counters):
        """Appends a metrics line; `counters` are the mode's own (e.g. updates_by_worker), lists of ints."""
        append_metrics(self.logdir, step, loss, examples_per_sec, **counters)
        for name, pairs in counters.items():
            if name.endswith("_histogram") and pairs:
                self._histogram(step, removesuffix(name, "_histogram"), pairs)
        self._scalars(step, loss=loss, examples_per_sec=examples_per_sec, **_scalars_of(counters))

    def _histogram(self, step, tag, pairs):
        """A TensorBoard histogram from a counter's [[value, count], ...] (each value its own bucket);
        written with the next scalars."""
        values, counts = np.array(pairs, dtype=np.float64).T
        histogram = tf.HistogramProto(
            min=values.min(),
            max=values.max(),
            num=counts.sum(),
            sum=(values * counts).sum(),
            sum_squares=(values * values * counts).sum(),
            bucket_limit=[*values[1:] - 0.5, values.max() + 0.5],
            bucket=counts,
        )
        self._events.add_summary(tf.Summary(value=[tf.Summary.Value(tag=tag, histo=histogram)]), step)

    def _scalars(self, step, **values):
        summary = tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()])
        self._events.add_summary(summary, step)
        self._events.flush()

    def snapshot(self, step, named_params):
        """params_at/<step>.npz: the parameters as they are at `step` (--snapshot_every)."""
        directory = os.path.join(self.logdir, SNAPSHOTS)
        os.makedirs(directory, exist_ok=True)
        with written_atomically(os.path.join(directory, f"{step}.npz")) as partial:
            np.savez(partial, **named_params)

    def finish(self, summary, named_params):
        """Writes params.npz and summary.json (last, so its presence means the run completed)."""
        self._scalars(summary["train_steps"], eval_accuracy=summary["eval_accuracy"])
        write_results(self.logdir, summary, named_params)
        self._events.close()


def _scalars_of(counters):
    """{tag: number}: each number counter, and each element of a counter by worker or group as <name>/<i>."""
    scalars = {}
    for name, value in counters.items():
        if isinstance(value, (int, float)):
            scalars[name] = value
        elif isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
            scalars.update({f"{name}/{i}": v for i, v in enumerate(value)})
    return scalars


def append_metrics(logdir, step, loss, examples_per_sec, **counters):
    """One line of metrics.jsonl."""
    record = {"step": step, "loss": loss, "examples_per_sec": examples_per_sec, "wall_time": time.time(), **counters}
    with open(os.path.join(logdir, "metrics.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def write_results(logdir, summary, named_params):
    """params.npz, then summary.json (last, and atomically, so its presence means the run completed)."""
    np.savez(os.path.join(logdir, "params.npz"), **named_params)
    write_atomically(os.path.join(logdir, "summary.json"), json.dumps(summary, indent=2, sort_keys=True) + "\n")
