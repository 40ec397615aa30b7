"""A study's plan (study.py): its variants or modes, its seeds or repeats, and every run they make (the references
first, then each variant at each worker count), each checked as its launcher and tasks will check it before the
first starts."""

from __future__ import annotations

import dataclasses

from absl import flags

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.launch.recipe_checks import check_task_flags
from parallel_tf.tools import runs
from parallel_tf.training import modes, run_check, run_flags

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    variant: str  # "reference" for the run every other is compared with (reference_run)
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


def plan(recipe, variants, worker_counts, seeds):
    """Every run: the references first (one per seed), then the clusters. `seeds`: [None] * repeats, or
    the --seeds. Every run evaluates on held-out data, every --log_every steps unless --eval_every says
    otherwise; in a study of --modes it also saves its parameters as often, for the drift from the reference."""
    interval = FLAGS.eval_every if FLAGS["eval_every"].present else FLAGS.log_every
    evaluating = [] if FLAGS["eval_every"].present else [f"--eval_every={interval}"]
    if not FLAGS.variants and not FLAGS["snapshot_every"].present:
        evaluating.append(f"--snapshot_every={interval}")

    def seeded(seed):
        return [] if seed is None else [f"--seed={seed}"]

    reference_mode, command = reference_run(recipe, FLAGS.strict_determinism)
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


def reference_run(recipe, strict):
    """(mode, command) of the reference run: one plain process, or in a --strict_determinism study sync
    strict on one worker (the study's flags give it strict), which every strict row equals bit for bit
    (the one process sums its batch in one pass, not in microbatches, and differs from them by rounding)."""
    if strict:
        return "sync", runs.cluster_command(recipe, "sync", 1)
    return run_check.NO_CLUSTER, runs.single_process_command(recipe)


def seeds():
    """[None] * --repeats, or the --seeds (each a repeat)."""
    if not FLAGS.seeds:
        return [None] * FLAGS.repeats
    for flag in ("repeats", "seed"):
        if FLAGS[flag].present:
            raise ConfigError(f"--seeds and --{flag}: give one (--seeds runs one repeat per seed)")
    if not all(seed.strip().isdigit() for seed in FLAGS.seeds) or len(set(FLAGS.seeds)) < len(FLAGS.seeds):
        raise ConfigError(f"--seeds={','.join(FLAGS.seeds)}: expected distinct whole numbers, e.g. 0,1,2,3,4")
    return [int(seed) for seed in FLAGS.seeds]


def check_runs_fit(plan):
    """Every cluster run's flags, parsed and composed as its launcher and tasks will (run_check.check_run_fits),
    before the first run starts: a variant whose techniques do not go together stops the study at once."""
    for run in plan:
        if run.mode == run_check.NO_CLUSTER or run.repeat > 1:
            continue
        try:
            run_check.check_run_fits(_counted_cluster(run), run.mode, run_flags.parse_run_args(run.given))
        except ConfigError as e:
            raise ConfigError(f"variant {run.variant!r} on {run.workers} workers: {e}") from None


def check_recipe_flags(recipe, run, recipe_flags):
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


def variants(text):
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
    modes_studied(list(dict.fromkeys(mode for _, mode, _ in variants)))
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


def modes_studied(names):
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
