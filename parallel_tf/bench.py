"""Benchmark: milliseconds per step of a recipe in one plain process and on local clusters.

    python -m parallel_tf.bench [--recipe=mnist] [--workers=1,2] [--train_steps=500] [--out=DIR]

Runs the single-process reference, then one local cluster per worker count, one after another,
and prints a table from their summary.json files. The cluster/process ratio is the cost of the
parameter-server protocol (RPCs, barrier) at this model size. Extra flags go to every run.
"""

import os
import sys
import tempfile

from absl import app, flags

from parallel_tf import runs
from parallel_tf.cli import exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.errors import ConfigError
from parallel_tf.launch import resolve_recipe
from parallel_tf.modes import MODES

FLAGS = flags.FLAGS


def define_bench_flags():
    flags.DEFINE_string("recipe", "mnist", "Recipe name or path.")
    flags.DEFINE_enum("mode", "sync", MODES, "Cluster mode to measure.")
    flags.DEFINE_list("workers", ["1", "2"], "Worker counts to measure, comma-separated.")
    flags.DEFINE_integer("train_steps", 500, "Steps per run.", lower_bound=1)
    flags.DEFINE_string("out", None, "Directory for the runs' logdirs; default: a temporary one.")
    runs.define_sync_flags()


def main(argv):
    extra = [arg for arg in argv[1:] if arg != "--"]
    try:
        recipe = resolve_recipe(FLAGS.recipe)
        worker_counts = positive_ints("workers", FLAGS.workers)
    except ConfigError as e:
        exit_config_error(str(e))
    out = FLAGS.out or tempfile.mkdtemp(prefix="parallel_tf-bench-")
    steps = [f"--train_steps={FLAGS.train_steps}", f"--log_every={FLAGS.train_steps}"]
    plan = [("one process", 1, runs.single_process_command(recipe), [])]
    sync_flags = runs.sync_flags(FLAGS.mode, FLAGS.aggregation, FLAGS.strict_determinism)
    label = " ".join([FLAGS.mode, *[flag.lstrip("-").split("=")[-1] for flag in sync_flags]])
    plan += [(label, n, runs.cluster_command(recipe, FLAGS.mode, n), sync_flags) for n in worker_counts]
    rows = []
    for index, (label, workers, command, mode_flags) in enumerate(plan):
        logdir = os.path.join(out, f"{index}-{label.replace(' ', '_')}-{workers}w")
        print(f"[bench] {label}, {workers} worker(s): {logdir}", flush=True)
        try:
            rows.append((label, workers, runs.run(command, logdir, [*steps, *extra, *mode_flags])))
        except runs.RunFailed as e:
            print(f"error: the {label} run with {workers} worker(s) {e}", file=sys.stderr)
            sys.exit(1)
    print_table(rows)


def print_table(rows):
    reference = rows[0][2]["ms_per_step"]
    print(f"\n{'run':<26}{'workers':>8}{'ms/step':>10}{'examples/s':>12}{'x process':>11}  params_sha256")
    for label, workers, summary in rows:
        ms = summary["ms_per_step"]
        print(
            f"{label:<26}{workers:>8}{ms:>10.2f}{summary['examples_per_sec']:>12.0f}{ms / reference:>11.1f}  "
            f"{summary['params_sha256'][:16]}"
        )


if __name__ == "__main__":
    define_bench_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True))
