"""Studies: does a recipe train the same parameters on repeat and across worker counts, and does a
technique help?

    python -m parallel_tf.study [--recipe=mnist] [--workers=1,2,4] [--repeats=2 | --seeds=0,1,2] [--out=DIR]
                                [--modes=sync,async,hierarchical | --variants="async;async --staleness_aware"]
                                [--target_accuracy=A | --target_loss=L] [--strict_determinism]
                                [run and mode flags, e.g. --train_steps=200] [the recipe's own flags]

Runs the recipe once in one plain process (the reference; one per seed with --seeds; with
--strict_determinism sync strict on one worker, which every strict run equals bit for bit), then a local
cluster for every mode (or variant: a mode and flags of its own), worker count and repeat, one
after another, each evaluating on held-out data as it trains, and writes to DIR:

    report.json      every run's results, the verdicts and the comparisons
    report.md        the same as tables: per run (params_sha256, final loss, eval accuracy, max
                     |Δparam| against the reference, examples/sec, KB sent, staleness), and each
                     variant against the first on held-out data (held_out.py)
    loss_curves.png  training loss against step, time and MB sent, one line per run (curves.py)
    held_out.png     held-out loss, each variant's mean and band over its repeats (held_out.py)
    drift.png        with --modes: the largest parameter difference from the reference as the runs
                     train (drift.py)
    runs/            each run's logdir and output log

The report is rewritten after every run, so an interrupted study keeps what it has measured.
Mode options (--strict_determinism, --push_every, ...) go to the runs of their mode, and must
apply to every mode studied; run flags and flags it does not know go to every run.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags

from parallel_tf.backports import shlex_join
from parallel_tf.cli import define_float, exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.errors import ConfigError
from parallel_tf.launch.launcher import resolve_recipe
from parallel_tf.tools import runs, study_plan
from parallel_tf.tools.study_report import Study
from parallel_tf.training import modes, run_check, run_flags
from parallel_tf.training.logdir import STUDY, prepare_logdir

FLAGS = flags.FLAGS


def define_study_flags():
    """The study's own flags, and the recipe, run and mode flags it passes on to its runs (each run gets
    the mode options that apply to its mode: run_check.given_task_flags)."""
    run_flags.define_recipe_flag()
    run_flags.define_mode_option_flags()
    run_flags.define_run_flags()
    flags.DEFINE_list(
        "workers",
        None,
        "Worker counts, comma-separated. Default: 1,2,4 for --modes (is a mode the same at every worker "
        "count?), 4 for --variants (techniques compared where they differ).",
    )
    flags.DEFINE_string("out", None, "Directory for the report and the runs; default runs/study-<time>.")
    flags.DEFINE_integer("repeats", 2, "Runs of each mode and worker count.", lower_bound=1)
    flags.DEFINE_list(
        "seeds",
        None,
        "Instead of --repeats: one repeat per seed, e.g. 0,1,2,3,4, so that runs which repeat bitwise (sync) "
        "vary as training does from seed to seed; each seed gets a one-process reference of its own.",
    )
    flags.DEFINE_list("modes", ["sync"], f"Modes to study, comma-separated, from {', '.join(modes.NAMES)}.")
    flags.DEFINE_string(
        "variants",
        None,
        'Instead of --modes: variants to compare, separated by ";", each a mode and its own flags, e.g. '
        '"async;async --staleness_aware;async --delay_compensation=0.5". The first is the baseline.',
    )
    define_float(
        "target_accuracy",
        None,
        "Report the seconds each run took to reach this held-out accuracy, and compare them.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    define_float(
        "target_loss", None, "Report the seconds each run took to get down to this held-out loss.", lower_bound=0.0
    )
    run_flags.define_dry_run_flag("the runs it plans, each command")


def main(argv):
    recipe_flags = [arg for arg in argv[1:] if arg != "--"]
    try:
        recipe = resolve_recipe(FLAGS.recipe)
        worker_counts = positive_ints("workers", FLAGS.workers or (["4"] if FLAGS.variants else ["1", "2", "4"]))
        variants = (
            study_plan.variants(FLAGS.variants)
            if FLAGS.variants
            else [(mode, mode, []) for mode in study_plan.modes_studied(FLAGS.modes)]
        )
        plan = study_plan.plan(recipe, variants, worker_counts, study_plan.seeds())
        study_plan.check_runs_fit(plan)
        study_plan.check_recipe_flags(recipe, plan[0], recipe_flags)  # a typo: one line, nothing made
        out = runs.out_dir(FLAGS.out, "study")
        if FLAGS.dry_run:
            print(f"[study] --dry_run: {len(plan)} runs planned, into {out}; none started:")
            for index, run in enumerate(plan, 1):
                print(
                    f"[study]   {index}/{len(plan)} {run.name}: {shlex_join([*run.command, *run.given, *recipe_flags])}"
                )
            return
        prepare_logdir(out, STUDY)
    except ConfigError as e:
        exit_config_error(str(e))
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    study = Study(out, recipe, FLAGS.target_accuracy, FLAGS.target_loss)
    try:
        # The cluster runs fork their tasks from one warm server: one load of TensorFlow, the same bits
        with runs.warm_server(any(run.mode != run_check.NO_CLUSTER for run in plan), "study") as warm_server:
            _run_each(plan, study, recipe_flags, warm_server)
    except KeyboardInterrupt:  # the run under way is killed with it (subprocess.run)
        print(
            f"\n[study] interrupted; the runs finished so far are in {os.path.join(out, 'report.md')}", file=sys.stderr
        )
        sys.exit(130)
    finally:
        study.draw()  # a study stopped by a failed run or Ctrl-C keeps the figures of its runs so far
    for line in study.verdict_lines():
        print(f"[study] {line}")
    print(f"[study] report: {os.path.join(out, 'report.md')}")


def _run_each(plan, study, recipe_flags, warm_server):
    """Runs the plan one run after another, each added to the study as it ends; a refused run stops it (exit 2)."""
    out = study.out
    for index, run in enumerate(plan, 1):
        logdir = os.path.join(out, "runs", run.name)
        print(f"[study] {index}/{len(plan)} {run.name} ...", flush=True)
        started = time.time()
        try:
            summary = runs.run(
                run.command, logdir, [*run.given, *recipe_flags], log_path=logdir + ".log", warm_server=warm_server
            )
        except runs.RunFailed as e:
            if e.returncode == 2:  # a flag the runs refuse: the user's mistake, one line
                exit_config_error(f"run {run.name}: {e.error_line()}")
            print(f"error: run {run.name} {e}", file=sys.stderr)
            sys.exit(1)
        if run.also_reference:
            study.add("reference", 1, 1, logdir, summary, run.seed)
        row = study.add(run.variant, run.workers, run.repeat, logdir, summary, run.seed)
        print(
            f"[study] {index}/{len(plan)} {run.name} done in {time.time() - started:.0f}s: "
            f"loss {row['final_loss']:.6f}  params_sha256 {row['params_sha256'][:16]}",
            flush=True,
        )


def run_command_line():
    """`python -m parallel_tf.study`."""
    define_study_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True, command=__name__))
