"""Benchmark: milliseconds per step of a recipe in one plain process and on local clusters.

    python -m parallel_tf.bench [--recipe=mnist] [--workers=1,2] [--train_steps=500] [--out=DIR]

Runs the single-process reference, then one local cluster per worker count, one after another,
and prints a table from their summary.json files. The cluster/process ratio is the cost of the
parameter-server protocol (RPCs, barrier) at this model size. Extra flags go to every run.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

from parallel_tf.cli import exit_config_error, parse_flags_or_exit
from parallel_tf.errors import ConfigError
from parallel_tf.launch import resolve_recipe
from parallel_tf.modes import MODES

FLAGS = flags.FLAGS
RUN_TIMEOUT_SECS = 1800


def define_bench_flags():
    flags.DEFINE_string("recipe", "mnist", "Recipe name or path.")
    flags.DEFINE_enum("mode", "sync", MODES, "Cluster mode to measure.")
    flags.DEFINE_list("workers", ["1", "2"], "Worker counts to measure, comma-separated.")
    flags.DEFINE_integer("train_steps", 500, "Steps per run.", lower_bound=1)
    flags.DEFINE_string("out", None, "Directory for the runs' logdirs; default: a temporary one.")


def main(argv):
    extra = [arg for arg in argv[1:] if arg != "--"]
    try:
        recipe = resolve_recipe(FLAGS.recipe)
        worker_counts = [_positive_int(w) for w in FLAGS.workers]
    except ConfigError as e:
        exit_config_error(str(e))
    out = FLAGS.out or tempfile.mkdtemp(prefix="parallel_tf-bench-")
    steps = [f"--train_steps={FLAGS.train_steps}", f"--log_every={FLAGS.train_steps}"]
    runs = [("one process", 1, [sys.executable, recipe])]
    runs += [
        (
            f"{FLAGS.mode} cluster",
            n,
            [
                sys.executable,
                "-m",
                "parallel_tf.launch",
                f"--recipe={recipe}",
                f"--mode={FLAGS.mode}",
                f"--num_workers={n}",
            ],
        )
        for n in worker_counts
    ]
    rows = []
    for index, (label, workers, command) in enumerate(runs):
        logdir = os.path.join(out, f"{index}-{label.replace(' ', '_')}-{workers}w")
        print(f"[bench] {label}, {workers} worker(s): {logdir}", flush=True)
        done = subprocess.run(
            [*command, f"--logdir={logdir}", *steps, *extra], capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS
        )
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
            print(f"error: the {label} run with {workers} worker(s) exited {done.returncode}", file=sys.stderr)
            sys.exit(1)
        with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
            rows.append((label, workers, json.load(f)))
    print_table(rows)


def print_table(rows):
    reference = rows[0][2]["ms_per_step"]
    print(f"\n{'run':<16}{'workers':>8}{'ms/step':>10}{'examples/s':>12}{'x process':>11}  params_sha256")
    for label, workers, summary in rows:
        ms = summary["ms_per_step"]
        print(
            f"{label:<16}{workers:>8}{ms:>10.2f}{summary['examples_per_sec']:>12.0f}{ms / reference:>11.1f}  "
            f"{summary['params_sha256'][:16]}"
        )


def _positive_int(text):
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"--workers: {text!r} is not a positive integer")
    return int(text)


if __name__ == "__main__":
    define_bench_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True))
