"""Where a run's outputs go, and the rules that keep them: a finished run is never overwritten,
an unfinished one is resumed by the same command, and --fresh moves an old one aside, never deletes it."""

import dataclasses
import datetime
import json
import os

from parallel_tf import compat
from parallel_tf.errors import ConfigError
from parallel_tf.training import modes, run_check

RUN_FILE = "run.json"


def default_logdir(recipe, mode, create=True):
    """A new directory runs/<recipe>-<mode>-<time>[-n], created here so that two runs started in the
    same second cannot share it (and one resume the other); with `create` False, its name only."""
    for path in _numbered(os.path.join("runs", f"{recipe}-{mode}-{_now()}")):
        if not create:
            if not os.path.exists(path):
                return path
            continue
        try:
            _make_dirs(path)
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise ConfigError(f"cannot create {path} for the outputs: {e.strerror}; give --logdir") from None


def _make_dirs(path, tries=5):
    """os.makedirs, tried again where another run's remove_if_empty took the empty runs/ away between the
    parent's creation and the leaf's (FileNotFoundError)."""
    for _ in range(tries - 1):
        try:
            return os.makedirs(path)
        except FileNotFoundError:
            continue
    return os.makedirs(path)


def remove_if_empty(path):
    """Removes a default logdir that a refused or failed start made and left empty, with runs/ if that is
    empty too: a run that never started leaves nothing behind."""
    if path and os.path.isdir(path) and not os.listdir(path):
        os.removedirs(path)


@dataclasses.dataclass(frozen=True)
class FolderKind:
    """What a tool writes into the folder it is given: a folder holds one kind, so a run's checkpoints never
    land beside a study's report, nor a study's runs in a run's logdir."""

    noun: str  # "a run"
    flag: str  # the flag that names such a folder
    finished: str  # the file that says it holds a finished one
    marks: tuple  # the files any folder of this kind holds, finished or not


RUN = FolderKind("a run", "--logdir", "summary.json", ("run.json", "summary.json", "checkpoint"))
STUDY = FolderKind("a study", "--out", "report.json", ("report.json",))
BENCH = FolderKind("a bench", "--out", "bench.json", ("bench.json",))
KINDS = (RUN, STUDY, BENCH)


def prepare_logdir(logdir, kind=RUN, fresh=False, train_steps=None):
    """Creates `logdir`, refusing one that holds a folder of another kind, or a finished one of this kind so
    none is overwritten, unless (a run) `train_steps` is more than it trained: then the run trains on from its
    last checkpoint (a resume, checked like any other by check_same_run), as the same command with a larger
    --train_steps would after an interruption.

    With `fresh`, a non-empty `logdir` of this kind is first renamed to `<logdir>.old-<time>`; returns that
    path (None if nothing was moved) so the caller can say where the old one went.
    """
    _refuse_another_kind(logdir, kind)
    moved_to = None
    if fresh and os.path.isdir(logdir) and os.listdir(logdir):
        moved_to = next(p for p in _numbered(f"{os.path.normpath(logdir)}.old-{_now()}") if not os.path.exists(p))
        os.rename(logdir, moved_to)
    _refuse_finished(logdir, kind, train_steps)
    try:
        os.makedirs(logdir, exist_ok=True)
        probe = os.path.join(logdir, ".write_test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{kind.flag}={logdir}: cannot write there: {e.strerror}") from None
    return moved_to


def _refuse_another_kind(folder, kind):
    """Raises ConfigError where `folder` holds what another tool wrote (a study's report given as a run's logdir)."""
    for other in KINDS:
        found = [mark for mark in other.marks if other != kind and os.path.exists(os.path.join(folder, mark))]
        if found:
            raise ConfigError(
                f"{kind.flag}={folder} holds {other.noun} ({found[0]}), not {kind.noun}: give {kind.noun} a folder "
                "of its own"
            )


def _refuse_finished(logdir, kind, train_steps):
    """Raises ConfigError where `logdir` holds a finished one of `kind` that `train_steps` would not train on."""
    if not os.path.exists(os.path.join(logdir, kind.finished)):
        return
    trained = _steps_trained(logdir) if kind == RUN and train_steps else None
    if trained is not None and train_steps > trained:
        return
    of = f" of {trained} steps" if trained is not None else ""
    finished = "a finished run" if kind == RUN else f"{kind.noun}'s results"
    raise ConfigError(
        f"{kind.flag}={logdir} already holds {finished} ({kind.finished}{of}); choose another {kind.flag}"
        + (
            f", pass --fresh to move it aside and start over, or a --train_steps above {trained} to train it on"
            if trained is not None
            else ", or pass --fresh to move it aside and start over"
            if kind == RUN
            else ""
        )
    )


def _steps_trained(logdir):
    """The --train_steps of the finished run in `logdir` (its summary.json), or None."""
    try:
        with open(os.path.join(logdir, RUN.finished), encoding="utf-8") as f:
            return int(json.load(f)["train_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What run.json records of a run without it deciding whether a resume is the same run: the link it had
# (--link_rate changes when things happen, not what is computed, so a resume may run on another), and the
# steps a run trained before issue 51 made --steps_per_run timing-only (the same bits, whatever k).
DESCRIBED = ("network", "steps_per_run")
# And, where the kernels are portable, the thread count: it moves no portable bit (tests/test_portable_bits.py),
# so a resume may take the cores of another machine.
DESCRIBED_IF_PORTABLE = ("intra_op_threads",)


def check_same_run(logdir, identity, may_change=("--train_steps",)):
    """Raises ConfigError if `logdir` holds a run that is not this one (`identity`: recipe, seed, batch, ...),
    so a resume can never mix two experiments. Every key counts: one recorded on one side only is a
    difference (a run that had no schedule against a command with one). `may_change`: the flags a resume of
    this run may change (resumable_changes), which the refusal names."""
    path = os.path.join(logdir, RUN_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        recorded = json.load(f)
    identity = json.loads(json.dumps(identity))  # as run.json holds it: tuples as lists
    changed = _differences(recorded, identity)
    if changed:
        trained = _steps_trained(logdir)
        which = f"a run finished at step {trained}" if trained is not None else "an unfinished run"
        shown = "; ".join(f"{key} {there}, here {here}" for key, there, here in changed[:SHOWN])
        rest = [key for key, _, _ in changed[SHOWN:]]
        more = f" (and {len(rest)} more: {', '.join(rest)})" if rest else ""
        raise ConfigError(
            f"--logdir={logdir} holds {which} that this command is not: {shown}{more}; a resume may change "
            f"{_listed(may_change)}, nothing else: give its flags, another --logdir, or --fresh to start over"
        )


def _differences(recorded, identity):
    """(key, value there, value here) for each key whose value differs, those both sides record first (the likeliest
    slip); a record of records (the schedule, the environment) by the keys inside it that differ."""
    portable = recorded.get("kernels") == identity.get("kernels") == "portable"
    described = DESCRIBED + DESCRIBED_IF_PORTABLE * portable
    keys = sorted(
        (key for key in recorded.keys() | identity.keys() if key not in described),
        key=lambda key: (key not in recorded or key not in identity, key),
    )
    differences = []
    for key in keys:
        there, here = recorded.get(key, _NONE), identity.get(key, _NONE)
        if there == here:
            continue
        if isinstance(there, dict) and isinstance(here, dict):  # inside a record, a key it lacks is one unset
            there, here = ({k: v for k, v in record.items() if v is not None} for record in (there, here))
            differences += [(f"{key}.{inner}", *values) for inner, *values in _differences(there, here)]
        else:
            differences.append((key, _shown(there), _shown(here)))
    return differences


def _shown(value):
    return "unset" if value is _NONE or value is None else value


def _listed(names):
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


SHOWN = 3  # differences a refusal spells out; the rest it counts
_NONE = object()  # a key one side of a comparison lacks


def check_resumable(logdir, identity, train_steps, fresh, may_change=("--train_steps",)):
    """What a task would refuse of `logdir`, checked without writing anything (the launcher's check, before
    any task starts): a folder of another kind, a finished run it would overwrite, or a run this command is not."""
    _refuse_another_kind(logdir, RUN)
    if not fresh and os.path.isdir(logdir):
        _refuse_finished(logdir, RUN, train_steps)
        check_same_run(logdir, identity, may_change)


def run_identity(recipe_name, settings):
    """Everything that decides what a run computes, which a resumed run must share with the interrupted one:
    the common flags, the recipe's own, every declared flag of its mode, on or off, and the learning-rate
    schedule they settle, the kernels and the thread count (compared for the fast kernels only). --train_steps
    may change (train longer), unless the schedule then changes; sync and all-reduce may resume on another worker
    count (their data position is the global step) unless a worker keeps state of its own (error feedback), one
    per worker."""
    identity = {
        "recipe": recipe_name,
        "dataset": settings.dataset,
        "mode": settings.mode,
        "seed": settings.seed,
        "global_batch_size": settings.global_batch_size,
        "optimizer": settings.optimizer,
        "learning_rate": settings.learning_rate,
        "learning_rate_schedule": dataclasses.asdict(settings.schedule),
        "kernels": compat.kernels(settings.kernels),
        "intra_op_threads": compat.intra_op_threads(settings.intra_op_threads),
        "environment": compat.bits_environment(compat.kernels(settings.kernels)),
        **dict(settings.recipe_flags),
        **settings.arithmetic_options(),
    }
    if not settings.lockstep or settings.keeps_worker_state:
        identity["num_workers"] = settings.num_workers
    if settings.options.link_rate:
        identity["network"] = settings.declared()["link"]
    return identity


def resumable_changes(settings):
    """The flags a resume of this run may change, keeping its bits: --train_steps (longer, unless the schedule
    then changes), the worker count of a lockstep run whose workers keep no state of their own, the parameter
    servers (a variable split over any count trains the same bits), and what changes when, not what, it computes."""
    changes = ["--train_steps"]
    if settings.lockstep and not settings.keeps_worker_state:
        changes.append("--num_workers")
    if modes.BY_NAME[settings.mode].parameter_servers:
        changes.append("--num_ps")
    timing = [d for d in run_check.DECLARATIONS if d.timing_only and settings.mode in d.modes]
    return [*changes, *(f"--{flag}" for d in timing for flag in d.flags)]


def record_run(logdir, identity):
    """Writes RUN_FILE once training starts (not before: a run refused for bad input claims nothing)."""
    path = os.path.join(logdir, RUN_FILE)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(identity, f, indent=2, sort_keys=True)
            f.write("\n")


def _numbered(base):
    """base, base-2, base-3, ...: names to try until one is free."""
    yield base
    n = 2
    while True:
        yield f"{base}-{n}"
        n += 1


def _now():
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}"
