"""Where a run's outputs go, and the rules that keep them: a finished run is never overwritten,
an unfinished one is resumed by the same command, and --fresh moves an old one aside, never deletes it."""

import dataclasses
import datetime
import json
import os

from parallel_tf.errors import ConfigError

FINISHED_MARKERS = ("summary.json",)
RUN_FILE = "run.json"


def default_logdir(recipe, mode):
    """A new directory runs/<recipe>-<mode>-<time>[-n], created here so that two runs started in the
    same second cannot share it (and one resume the other)."""
    for path in _numbered(os.path.join("runs", f"{recipe}-{mode}-{_now()}")):
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise ConfigError(f"cannot create {path} for the outputs: {e.strerror}; give --logdir") from None


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
    try:
        os.makedirs(logdir, exist_ok=True)
        probe = os.path.join(logdir, ".write_test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{flag}={logdir}: cannot write there: {e.strerror}") from None
    return moved_to


def _steps_trained(logdir):
    """The --train_steps of the finished run in `logdir` (its summary.json), or None."""
    try:
        with open(os.path.join(logdir, FINISHED_MARKERS[0]), encoding="utf-8") as f:
            return int(json.load(f)["train_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What run.json records of a run without it deciding whether a resume is the same run: the link it had
# (--link_rate changes when things happen, not what is computed, so a resume may run on another).
DESCRIBED = ("network",)


def check_same_run(logdir, identity):
    """Raises ConfigError if `logdir` holds an unfinished run that is not this one (`identity`:
    recipe, seed, batch, ...), so a resume can never mix two experiments."""
    path = os.path.join(logdir, RUN_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        recorded = json.load(f)
    changed = [
        key for key in sorted(identity) if key in recorded and key not in DESCRIBED and recorded[key] != identity[key]
    ]
    if changed:
        was = ", ".join(f"{key}={recorded[key]}" for key in changed)
        now = ", ".join(f"{key}={identity[key]}" for key in changed)
        raise ConfigError(
            f"--logdir={logdir} holds an unfinished run with {was}; this command has {now}: "
            "rerun it with the same settings to resume, or pass --fresh to start over"
        )


def run_identity(recipe_name, settings):
    """What a resumed run must share with the interrupted one for its checkpoint and data positions to
    mean the same thing: the common flags and its mode's options. --train_steps may change (train
    longer); sync may resume on another worker count (its data position is the global step)."""
    identity = {
        "recipe": recipe_name,
        "dataset": settings.dataset,
        "mode": settings.mode,
        "seed": settings.seed,
        "global_batch_size": settings.global_batch_size,
        "optimizer": settings.optimizer,
        "learning_rate": settings.learning_rate,
        **settings.mode_options(),
    }
    if not settings.lockstep:
        identity["num_workers"] = settings.num_workers
    if not settings.schedule.is_constant or settings.linear_scaling_batch:  # recorded only when used: older runs resume
        identity["learning_rate_schedule"] = dataclasses.asdict(settings.schedule)
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
