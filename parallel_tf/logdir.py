"""Where a run's outputs go, and the rule that a new run never overwrites an old one's."""

import datetime
import os

from parallel_tf.errors import ConfigError

FINISHED_MARKERS = ("summary.json", "metrics.jsonl")


def default_logdir(recipe, mode):
    return os.path.join("runs", f"{recipe}-{mode}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def prepare_logdir(logdir, flag="--logdir", markers=FINISHED_MARKERS):
    """Creates `logdir`, refusing one that already holds outputs (`markers`) so none are overwritten."""
    for marker in markers:
        if os.path.exists(os.path.join(logdir, marker)):
            raise ConfigError(f"{flag}={logdir} already holds a run ({marker}); choose another {flag}")
    try:
        os.makedirs(logdir, exist_ok=True)
        probe = os.path.join(logdir, ".write_test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{flag}={logdir}: cannot write there: {e.strerror}") from None
