"""Benchmark: milliseconds per step of a recipe in one plain process and on local clusters.

    python -m parallel_tf.bench [--recipe=mnist] [--mode=sync] [--workers=1,2,4] [--train_steps=N] [--out=DIR]
                                [run and mode flags] [the recipe's own flags]

Runs the single-process reference, then one local cluster per worker count, one after another,
and prints a table from their summary.json files. The cluster/process ratio is the cost of the
parameter-server protocol (RPCs, barrier) at this model size, and the bytes columns what the chief
sends and receives per step. With --trace_steps=FIRST:END it also prints where those steps' time
went (profiling.py). Run and mode flags go to the runs they apply to; flags it does not know go to
every run.
"""

import json
import os
import sys

from absl import app, flags

from parallel_tf import flags as task_flags
from parallel_tf import profiling, runs
from parallel_tf.cli import exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.errors import ConfigError
from parallel_tf.launch import resolve_recipe

FLAGS = flags.FLAGS


def define_bench_flags():
    task_flags.define_mode_flag()
    runs.define_tool_flags("bench")


def main(argv):
    recipe_flags = [arg for arg in argv[1:] if arg != "--"]
    try:
        recipe = resolve_recipe(FLAGS.recipe)
        worker_counts = positive_ints("workers", FLAGS.workers)
        task_flags.check_flag_scopes(FLAGS.mode, task_flags.MODE_OPTION_SCOPES)
        profiling.parse_steps(FLAGS.trace_steps)
    except ConfigError as e:
        exit_config_error(str(e))
    out = runs.out_dir(FLAGS.out, "bench")
    log_once = [f"--log_every={FLAGS.train_steps}"]
    single = task_flags.given_task_flags(task_flags.NO_CLUSTER)
    plan = [("one process", 1, runs.single_process_command(recipe), single)]
    cluster_flags = task_flags.given_task_flags(FLAGS.mode)
    mode_flags = [flag for flag in cluster_flags if flag not in single]
    label = " ".join([FLAGS.mode, *[flag.lstrip("-").split("=")[-1] for flag in mode_flags]])
    plan += [(label, n, runs.cluster_command(recipe, FLAGS.mode, n), cluster_flags) for n in worker_counts]
    rows = []
    for index, (label, workers, command, given) in enumerate(plan):
        logdir = os.path.join(out, f"{index}-{label.replace(' ', '_')}-{workers}w")
        print(f"[bench] {label}, {workers} worker(s): {logdir}", flush=True)
        try:
            rows.append((label, workers, runs.run(command, logdir, [*log_once, *given, *recipe_flags]), logdir))
        except runs.RunFailed as e:
            print(f"error: the {label} run with {workers} worker(s) {e}", file=sys.stderr)
            sys.exit(1)
    print_table(rows)
    if FLAGS.trace_steps:
        print_profile(rows)


def print_table(rows):
    """ms/step and throughput, against the one process, beside the bytes the chief sent and received per
    step (traffic.py: from the tensors of its step that cross tasks)."""
    reference = rows[0][2]["ms_per_step"]
    print(
        f"\n{'run':<26}{'workers':>8}{'ms/step':>10}{'examples/s':>12}{'x process':>11}"
        f"{'KB sent/step':>14}{'KB recv/step':>14}  params_sha256"
    )
    for label, workers, summary, _ in rows:
        ms = summary["ms_per_step"]
        sent, received = (summary.get(f"bytes_{way}_per_step", 0) / 1000 for way in ("sent", "received"))
        print(
            f"{label:<26}{workers:>8}{ms:>10.2f}{summary['examples_per_sec']:>12.0f}{ms / reference:>11.1f}"
            f"{sent:>14.1f}{received:>14.1f}  {summary['params_sha256'][:16]}"
        )


def print_profile(rows):
    """Where a traced step's time went (--trace_steps), the means over each run's traced steps: its wall
    time, and op time by kind on every task it touched (profiling.py; kinds overlap in time)."""
    print(f"\n{'traced steps (ms)':<26}{'workers':>8}{'wall':>9}" + "".join(f"{kind:>10}" for kind in profiling.KINDS))
    for label, workers, _, logdir in rows:
        path = os.path.join(logdir, "trace_breakdown.jsonl")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            traced = [json.loads(line) for line in f]
        wall = sum(t["wall_ms"] for t in traced) / len(traced)
        kinds = "".join(f"{sum(t['op_ms'][kind] for t in traced) / len(traced):>10.2f}" for kind in profiling.KINDS)
        print(f"{label:<26}{workers:>8}{wall:>9.2f}{kinds}")


if __name__ == "__main__":
    define_bench_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True))
