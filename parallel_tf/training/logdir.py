"""Where a run's outputs go, and the rules that keep them: a finished run is never overwritten,
an unfinished one is resumed by the same command, and --fresh moves an old one aside, never deletes it."""

import dataclasses
import datetime
import json
import os

from parallel_tf import compat
from parallel_tf.errors import ConfigError

FINISHED_MARKERS = ("summary.json",)
RUN_FILE = "run.json"


def default_logdir(recipe, mode):
    """A new directory runs/<recipe>-<mode>-<time>[-n], created here so that two runs started in the
    same second cannot share it (and one resume the other)."""
    for path in _numbered(os.path.join("runs", f"{recipe}-{mode}-{_now()}")):
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


def prepare_logdir(logdir, flag="--logdir", markers=FINISHED_MARKERS, fresh=False, train_steps=None):
    """Creates `logdir`, refusing one that holds a finished run (`markers`) so none is overwritten,
    unless `train_steps` is more than it trained: then the run trains on from its last checkpoint
    (a resume, checked like any other by check_same_run), as the same command with a larger
    --train_steps would after an interruption.

    With `fresh`, a non-empty `logdir` is first renamed to `<logdir>.old-<time>`; returns that
    path (None if nothing was moved) so the caller can say where the old run went.
    """
    moved_to = None
    if fresh and os.path.isdir(logdir) and os.listdir(logdir):
        moved_to = next(p for p in _numbered(f"{os.path.normpath(logdir)}.old-{_now()}") if not os.path.exists(p))
        os.rename(logdir, moved_to)
    _refuse_finished(logdir, flag, markers, train_steps)
    try:
        os.makedirs(logdir, exist_ok=True)
        probe = os.path.join(logdir, ".write_test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{flag}={logdir}: cannot write there: {e.strerror}") from None
    return moved_to


def _refuse_finished(logdir, flag, markers, train_steps):
    """Raises ConfigError where `logdir` holds a finished run (`markers`) that `train_steps` would not train on."""
    for marker in markers:
        if not os.path.exists(os.path.join(logdir, marker)):
            continue
        trained = _steps_trained(logdir) if train_steps else None
        if trained is not None and train_steps > trained:
            continue
        of = f" of {trained} steps" if trained is not None else ""
        raise ConfigError(
            f"{flag}={logdir} already holds a finished run ({marker}{of}); choose another {flag}"
            + (
                f", pass --fresh to move it aside and start over, or a --train_steps above {trained} to train it on"
                if trained is not None
                else ", or pass --fresh to move it aside and start over"
                if flag == "--logdir"
                else ""
            )
        )


def _steps_trained(logdir):
    """The --train_steps of the finished run in `logdir` (its summary.json), or None."""
    try:
        with open(os.path.join(logdir, FINISHED_MARKERS[0]), encoding="utf-8") as f:
            return int(json.load(f)["train_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What run.json records of a run without it deciding whether a resume is the same run: the link it had
# (--link_rate changes when things happen, not what is computed, so a resume may run on another), and the
# steps a run trained before issue 51 made --steps_per_run timing-only (the same bits, whatever k).
DESCRIBED = ("network", "steps_per_run")
ONLY_CHANGE = "only --train_steps may change"


def check_same_run(logdir, identity):
    """Raises ConfigError if `logdir` holds a run that is not this one (`identity`: recipe, seed, batch, ...),
    so a resume can never mix two experiments. Every key counts: one recorded on one side only is a
    difference (a run that had no schedule against a command with one)."""
    path = os.path.join(logdir, RUN_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        recorded = json.load(f)
    identity = json.loads(json.dumps(identity))  # as run.json holds it: tuples as lists
    changed = sorted(  # those both sides recorded first: the likeliest slip
        (key for key in identity.keys() | recorded.keys() if recorded.get(key, _NONE) != identity.get(key, _NONE)),
        key=lambda key: (key not in recorded or key not in identity, key),
    )
    changed = [key for key in changed if key not in DESCRIBED]
    if changed:
        trained = _steps_trained(logdir)
        which = f"a run finished at step {trained}" if trained is not None else "an unfinished run"
        shown = "; ".join(
            f"{key} {recorded.get(key, '(none)')}, here {identity.get(key, '(none)')}" for key in changed[:SHOWN]
        )
        more = f" (and {len(changed) - SHOWN} more: {', '.join(changed[SHOWN:])})" if len(changed) > SHOWN else ""
        raise ConfigError(
            f"--logdir={logdir} holds {which} that this command is not: {shown}{more}; {ONLY_CHANGE} to resume "
            "it: give its flags, another --logdir, or --fresh to start over"
        )


SHOWN = 3  # differences a refusal spells out; the rest it names
_NONE = object()  # a key one side of a comparison lacks


def check_resumable(logdir, identity, train_steps, fresh):
    """What a task would refuse of `logdir`, checked without writing anything (the launcher's check, before
    any task starts): a finished run it would overwrite, or a run this command is not."""
    if not fresh and os.path.isdir(logdir):
        _refuse_finished(logdir, "--logdir", FINISHED_MARKERS, train_steps)
        check_same_run(logdir, identity)


def run_identity(recipe_name, settings):
    """Everything that decides what a run computes, which a resumed run must share with the interrupted one:
    the common flags, the recipe's own, every declared flag of its mode, on or off, and the learning-rate
    schedule they settle, the kernels and the thread count. --train_steps may change (train longer), unless
    the schedule then changes; sync and all-reduce may resume on another worker count (their data position
    is the global step) unless a worker keeps state of its own (error feedback), one per worker."""
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
        **dict(settings.recipe_flags),
        **settings.arithmetic_options(),
    }
    if not settings.lockstep or settings.keeps_worker_state:
        identity["num_workers"] = settings.num_workers
    if settings.link_rate:
        identity["network"] = settings.declared()["link"]
    return identity


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
