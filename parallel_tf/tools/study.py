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

import dataclasses
import json
import os
import sys
import time

from absl import app, flags

from parallel_tf.backports import shlex_join
from parallel_tf.cli import define_float, exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.files import write_atomically
from parallel_tf.launch.launcher import check_task_flags, resolve_recipe
from parallel_tf.tools import curves, drift, held_out, runs
from parallel_tf.training import modes, run_check, run_flags
from parallel_tf.training.logdir import STUDY, prepare_logdir

FLAGS = flags.FLAGS
# Sync's promise across worker counts (docs/reproducibility.md; tests/test_equalities.py checks it): final
# losses within this relative spread, parameters within this absolute difference.
CROSS_N_TOLERANCE = 1e-5


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
        variants = _variants(FLAGS.variants) if FLAGS.variants else [(mode, mode, []) for mode in _modes(FLAGS.modes)]
        plan = _plan(recipe, variants, worker_counts, _seeds())
        _check_runs_fit(plan)
        _check_recipe_flags(recipe, plan[0], recipe_flags)  # a typo: one line, nothing made
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


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    variant: str  # "reference" for the run every other is compared with (_reference)
    mode: str
    workers: int
    repeat: int
    seed: int | None  # with --seeds: this repeat's seed, given to the run as --seed
    command: list
    given: list  # the task flags the run gets (besides the recipe's own)
    also_reference: bool = False  # a row that is the reference run too (a strict study's sync on one worker)

    @property
    def name(self):
        """Its directory under runs/: reference, sync-2w-r1, async_staleness_aware-4w-s3, ..."""
        which = f"s{self.seed}" if self.seed is not None else f"r{self.repeat}"
        if self.variant == "reference":
            return "reference" if self.seed is None else f"reference-{which}"
        return f"{_slug(self.variant)}-{self.workers}w-{which}"


def _plan(recipe, variants, worker_counts, seeds):
    """Every run: the references first (one per seed), then the clusters. `seeds`: [None] * repeats, or
    the --seeds. Every run evaluates on held-out data, every --log_every steps unless --eval_every says
    otherwise; in a study of --modes it also saves its parameters as often, for the drift from the reference."""
    interval = FLAGS.eval_every if FLAGS["eval_every"].present else FLAGS.log_every
    evaluating = [] if FLAGS["eval_every"].present else [f"--eval_every={interval}"]
    if not FLAGS.variants and not FLAGS["snapshot_every"].present:
        evaluating.append(f"--snapshot_every={interval}")

    def seeded(seed):
        return [] if seed is None else [f"--seed={seed}"]

    reference_mode, command = _reference(recipe, FLAGS.strict_determinism)
    reference_given = [*run_check.given_task_flags(reference_mode), *evaluating]
    plan = [
        PlannedRun("reference", reference_mode, 1, 1, seed, command, reference_given + seeded(seed))
        for seed in dict.fromkeys(seeds)
    ]
    for variant, mode, variant_flags in variants:
        given = [*run_check.given_task_flags(mode), *evaluating, *variant_flags]
        for n in worker_counts:
            command = runs.cluster_command(recipe, mode, n, *_launcher_flags(mode, n))
            plan += [
                PlannedRun(variant, mode, n, repeat, seed, command, given + seeded(seed))
                for repeat, seed in enumerate(seeds, 1)
            ]
    return _reference_run_once(plan)


def _reference_run_once(plan):
    """The plan with each reference that a row repeats exactly (a strict study's sync on one worker: the same
    command and flags) run once, as that row, first."""
    references = [run for run in plan if run.variant == "reference"]
    for reference in references:
        same = next(
            (
                run
                for run in plan[len(references) :]
                if (run.command, run.given) == (reference.command, reference.given)
            ),
            None,
        )
        if same:
            plan = [dataclasses.replace(same, also_reference=True), *(r for r in plan if r not in (reference, same))]
    return plan


def _reference(recipe, strict):
    """(mode, command) of the reference run: one plain process, or in a --strict_determinism study sync
    strict on one worker (the study's flags give it strict), which every strict row equals bit for bit
    (the one process sums its batch in one pass, not in microbatches, and differs from them by rounding)."""
    if strict:
        return "sync", runs.cluster_command(recipe, "sync", 1)
    return run_check.NO_CLUSTER, runs.single_process_command(recipe)


def _seeds():
    """[None] * --repeats, or the --seeds (each a repeat)."""
    if not FLAGS.seeds:
        return [None] * FLAGS.repeats
    for flag in ("repeats", "seed"):
        if FLAGS[flag].present:
            raise ConfigError(f"--seeds and --{flag}: give one (--seeds runs one repeat per seed)")
    if not all(seed.strip().isdigit() for seed in FLAGS.seeds) or len(set(FLAGS.seeds)) < len(FLAGS.seeds):
        raise ConfigError(f"--seeds={','.join(FLAGS.seeds)}: expected distinct whole numbers, e.g. 0,1,2,3,4")
    return [int(seed) for seed in FLAGS.seeds]


def _check_runs_fit(plan):
    """Every cluster run's flags, parsed and composed as its launcher and tasks will (run_check.check_run_fits),
    before the first run starts: a variant whose techniques do not go together stops the study at once."""
    for run in plan:
        if run.mode == run_check.NO_CLUSTER or run.repeat > 1:
            continue
        try:
            run_check.check_run_fits(_counted_cluster(run), run.mode, run_flags.parse_run_args(run.given))
        except ConfigError as e:
            raise ConfigError(f"variant {run.variant!r} on {run.workers} workers: {e}") from None


def _check_recipe_flags(recipe, run, recipe_flags):
    """The recipe's own check of `run`'s flags (its chief's --check_flags, as a launch makes it), before anything
    starts: a strict study's reference is a cluster run, whose flags (--strict_determinism) the one plain
    process refuses."""
    if run.mode == run_check.NO_CLUSTER:
        check_task_flags(None, recipe, [*run.given, *recipe_flags])
    else:
        check_task_flags(_counted_cluster(run), recipe, [f"--mode={run.mode}", *run.given, *recipe_flags])


def _counted_cluster(run):
    """The shape of `run`'s cluster, on addresses that are only counted (nothing listens there)."""
    num_ps, num_groups = modes.server_counts(run.mode, 1, _num_groups(run.mode, run.workers))
    addresses = [f"127.0.0.1:{port}" for port in range(1, 1 + num_ps + num_groups + run.workers)]
    return cluster_lib.assign_jobs(addresses, num_ps, num_groups, f"{run.variant} on {run.workers} workers")


def _variants(text):
    """[(name, mode, flags), ...] from --variants: each a mode and the flags of that variant alone. A mode
    option of another mode is refused here; the runs check the values (a bad one stops the study with
    the run's one line)."""
    if FLAGS["modes"].present:
        raise ConfigError("--variants and --modes: give one (a variant names its mode)")
    variants = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        mode, *variant_flags = item.split()
        if mode not in modes.NAMES:
            raise ConfigError(f"--variants: {item!r} must start with a mode, one of {', '.join(modes.NAMES)}")
        if not all(flag.startswith("--") for flag in variant_flags):
            raise ConfigError(f"--variants: {item!r}: after the mode, only --flags")
        for flag in variant_flags:  # a declared flag of other modes: caught before any run
            name, scope = _declared_scope(flag[2:].split("=")[0])
            if mode not in scope:
                raise ConfigError(f"--variants: {item!r}: {run_check.not_for_mode(name, mode, scope)}")
        variants.append((item, mode, variant_flags))
    if not variants:
        raise ConfigError("--variants: empty")
    _modes(list(dict.fromkeys(mode for _, mode, _ in variants)))
    return variants


def _declared_scope(name):
    """(the flag's name, the modes it applies to) for a flag, maybe a boolean's --noNAME: every mode unless
    a declaration (a technique or an option) says otherwise."""
    scopes = run_check.DECLARED_SCOPES
    if name not in scopes and name.startswith("no") and name[2:] in scopes:
        name = name[2:]
    return name, scopes.get(name, modes.NAMES)


def _slug(variant):
    """A run's directory name for a variant: 'async --staleness_aware' -> 'async_staleness_aware'."""
    return "_".join(part.lstrip("-").replace("=", "-") for part in variant.split())


def _modes(names):
    """The --modes to study; a declared flag given must apply to every one of them, or some runs would not
    be the experiment the user asked for."""
    unknown = [m for m in names if m not in modes.NAMES]
    if unknown or not names:
        raise ConfigError(f"--modes: {', '.join(unknown) or 'empty'}: choose from {', '.join(modes.NAMES)}")
    for name, scope in run_check.DECLARED_SCOPES.items():
        outside = [mode for mode in names if mode not in scope]
        if FLAGS[name].present and outside:
            scope_modes = [mode for mode in scope if mode in modes.NAMES]
            raise ConfigError(
                f"--{name} is a {'|'.join(scope_modes)}-mode option: use it with --modes={','.join(scope_modes)}"
            )
    return names


def _num_groups(mode, num_workers):
    """Hierarchical runs split the workers into two groups where they can."""
    return min(2, num_workers) if mode == "hierarchical" else 0


def _launcher_flags(mode, num_workers):
    return [f"--num_groups={_num_groups(mode, num_workers)}"] if mode == "hierarchical" else []


class Study:
    """The runs so far: report.json and report.md rewritten after each run, the figures drawn when the study
    stops (drawing them after every run cost about 2 s a run, a third of a strict study's short runs)."""

    def __init__(self, out, recipe, target_accuracy=None, target_loss=None):
        self.out = out
        self.recipe = recipe
        self.targets = {"target_accuracy": target_accuracy, "target_loss": target_loss}
        self.target = " and ".join(
            f"{what} {value:g}" for what, value in (("accuracy", target_accuracy), ("loss", target_loss)) if value
        )
        self.references = {}  # by seed (None without --seeds): each run is compared with its seed's
        self.rows = []

    def add(self, variant, num_workers, repeat, logdir, summary, seed=None):
        metrics = runs.read_metrics(logdir)
        row = {
            "variant": variant,
            "workers": num_workers,
            "repeat": repeat,
            "seed": seed,
            "params_sha256": summary["params_sha256"],
            "final_loss": summary["final_loss"],
            "eval_accuracy": summary["eval_accuracy"],
            "examples_per_sec": summary["examples_per_sec"],
            "logdir": logdir,
            "losses": [(m["step"], m["loss"]) for m in metrics],
            "held_out": held_out.evaluations(metrics, summary["train_started"]),
            "seconds": [m["wall_time"] - summary["train_started"] for m in metrics],
            "bytes_sent_per_step": summary.get("bytes_sent_per_step", 0),
            "megabytes_sent": curves.megabytes_sent(metrics),
            "declared": summary.get("declared", {}),  # every technique and option that took effect, and how
            "idle": _idle(summary),
            **_staleness(summary.get("staleness_histogram")),
        }
        if variant == "reference":
            self.references[seed] = row
        else:
            reference = self.references[seed]["logdir"]
            row["max_abs_param_diff_vs_reference"] = runs.max_param_difference(logdir, reference)
            row["distances"] = drift.distances(logdir, reference)
            self.rows.append(row)
        self._write()
        return row

    def verdicts(self):
        """Per variant: are repeats identical (not measured when each has a seed of its own), and are all
        worker counts identical (or how far apart), each worker count's first repeat against the others'."""
        verdicts = {}
        for variant in dict.fromkeys(row["variant"] for row in self.rows):
            rows = [row for row in self.rows if row["variant"] == variant]
            by_n = {}
            for row in rows:
                by_n.setdefault(row["workers"], []).append(row)
            first_repeats = [group[0] for group in by_n.values()]
            losses = [row["final_loss"] for row in first_repeats]
            repeated = any(len(group) > 1 for group in by_n.values()) and rows[0]["seed"] is None
            verdicts[variant] = {  # None: not measured (one repeat, or one worker count)
                "repeats_identical": all(len({r["params_sha256"] for r in group}) == 1 for group in by_n.values())
                if repeated
                else None,
                "identical_across_workers": len({row["params_sha256"] for row in first_repeats}) == 1
                if len(by_n) > 1
                else None,
                "max_abs_param_diff_across_workers": max(
                    runs.max_param_difference(first_repeats[0]["logdir"], row["logdir"]) for row in first_repeats
                ),
                "final_loss_rel_spread_across_workers": (max(losses) - min(losses)) / abs(min(losses)),
            }
        return verdicts

    def verdict_lines(self):
        return self._lines(self.verdicts(), self.comparisons())

    def _lines(self, verdicts, comparisons):
        lines = []
        for variant, v in verdicts.items():
            lines.append(f"{variant}: repeats identical: {_yes(v['repeats_identical'])}")
            across = f"{variant}: identical across N: {_yes(v['identical_across_workers'])}"
            if v["identical_across_workers"] is False:  # bitwise is strict's promise; say how far apart
                within = _yes(
                    v["max_abs_param_diff_across_workers"] <= CROSS_N_TOLERANCE
                    and v["final_loss_rel_spread_across_workers"] <= CROSS_N_TOLERANCE
                )
                across += (
                    f"; within sync's promised {CROSS_N_TOLERANCE:g}: {within} "
                    f"(max |Δparam| = {v['max_abs_param_diff_across_workers']:.3g}, "
                    f"final loss spread {v['final_loss_rel_spread_across_workers']:.3g} relative)"
                )
            lines.append(across)
        return lines + held_out.verdict_lines(comparisons, self.target)

    def comparisons(self):
        """Each variant against the first at the same worker count, on held-out data (held_out.compare)."""
        if not self.rows or not all(row["held_out"] for row in self.rows):
            return []
        return held_out.compare(self.rows, **self.targets)

    def _write(self):
        verdicts, comparisons = self.verdicts(), self.comparisons()
        report = {
            "recipe": self.recipe,
            "reference": self._references()[0],
            "references": self._references(),
            "runs": self.rows,
            "verdicts": verdicts,
            "comparisons": comparisons,
        }
        write_atomically(os.path.join(self.out, "report.json"), json.dumps(report, indent=2) + "\n")
        write_atomically(os.path.join(self.out, "report.md"), self._markdown(verdicts, comparisons))

    def draw(self):
        """loss_curves.png, and held_out.png and drift.png where the runs have what they draw."""
        every = [*self._references(), *self.rows]
        if not every:
            return
        curves.plot(every, os.path.join(self.out, "loss_curves.png"))
        if all(row["held_out"] for row in every):
            held_out.plot_bands(every, os.path.join(self.out, "held_out.png"))
        if any(row["distances"] for row in self.rows):
            drift.plot(self.rows, os.path.join(self.out, "drift.png"))

    def _references(self):
        return list(self.references.values())

    def _markdown(self, verdicts, comparisons):
        kind = f"Variants compared with `{self.rows[0]['variant']}`" if comparisons else "Reproducibility study"
        lines = [
            f"# {kind}: {os.path.basename(self.recipe)}",
            "",
            "| variant | N | repeat | params_sha256 | final loss | eval accuracy "
            "| max \\|Δparam\\| vs reference | examples/sec | KB sent/step | mean staleness | max staleness |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in [*self._references(), *self.rows]:
            diff = row.get("max_abs_param_diff_vs_reference")
            lines.append(
                f"| {row['variant']} | {row['workers']} | {curves.repeat_name(row)} | `{row['params_sha256'][:16]}` "
                f"| {row['final_loss']:.9g} | {row['eval_accuracy']:.4f} | {_or_dash(diff, '.3g')} "
                f"| {row['examples_per_sec']:.0f} | {row['bytes_sent_per_step'] / 1000:.1f} "
                f"| {_or_dash(row['mean_staleness'], '.2f')} "
                f"| {_or_dash(row['max_staleness'], 'd')} |"
            )
        lines += held_out.markdown(comparisons, self.target)
        lines += ["", *[f"- {line}" for line in self._lines(verdicts, comparisons)], ""]
        lines += _what_ran(self.rows)
        return "\n".join(lines)


def _idle(summary):
    """The flags of the techniques on in a run that never changed anything (their effect counter is 0)."""
    return [
        f"--{d.flags[0]} ({d.effect} 0)"
        for d in run_check.DECLARATIONS
        if d.effect and d.name in summary.get("declared", {}) and not sum(_as_list(summary.get(d.effect, 0)))
    ]


def _as_list(counter):
    return counter if isinstance(counter, list) else [counter]


def _what_ran(rows):
    """What each variant's runs had on, as summary.json's `declared` says (the schedule in its clock, the
    compression algorithm, ...): a report says exactly what it compared."""
    seen = {}
    for row in rows:
        seen.setdefault((row["variant"], json.dumps(row["declared"], sort_keys=True)), row["declared"])
    lines = ["## What ran", ""]
    for (variant, _), declared in seen.items():
        parts = "; ".join(f"{name} {json.dumps(what, sort_keys=True)}" for name, what in declared.items())
        lines.append(f"- `{variant}`: {parts or 'no technique or option beyond the mode'}")
    return [*lines, ""]


def _staleness(histogram):
    """Mean and largest staleness of an async run's pushes, from its [[σ, pushes], ...]; None otherwise."""
    if not histogram:
        return {"mean_staleness": None, "max_staleness": None}
    pushes = sum(count for _, count in histogram)
    return {
        "mean_staleness": sum(sigma * count for sigma, count in histogram) / pushes,
        "max_staleness": max(sigma for sigma, _ in histogram),
    }


def _or_dash(value, spec):
    return "—" if value is None else format(value, spec)


def _yes(value):
    return "not measured" if value is None else "yes" if value else "no"


def run_command_line():
    """`python -m parallel_tf.study`."""
    define_study_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True, command=__name__))
