"""A bounded wait for all-reduce on TensorFlow 1.15, whose collectives wait forever for a peer that is gone.

On 2.x a collective waiting on a missing worker fails after --operation_timeout (operation_timeout_in_ms). On 1.15
it waits on: the session's timeout, a run's own timeout_in_ms and closing the session all pass it by (each tried on
an in-process cluster of two workers, one missing). So a task of all-reduce on 1.x keeps its promise by a watch of
its own: where no session run of its training has ended for --operation_timeout seconds (--startup_timeout more
before the first, which includes joining and the broadcast of the initial values), it ends the task, exit 1, naming
why, as a step that timed out on 2.x does. A single step longer than the timeout is ended too, where 2.x would end
only an op that waited that long: raise --operation_timeout for steps that long.
"""

import threading
import time

from parallel_tf import compat

POLL_SECS = 1.0


def needed(settings):
    """Whether a task of `settings` needs the watch: all-reduce, on TensorFlow 1.x, with a timeout."""
    return settings.mode == "allreduce" and compat.tensorflow_1() and settings.operation_timeout > 0


def watch(trainer, settings, fail):
    """Starts the watch of `trainer`'s session runs (Trainer.session_runs) in a daemon thread; `fail(message)` ends
    the task where they stall."""
    thread = threading.Thread(target=_watch, args=(trainer, settings, fail), name="watchdog", daemon=True)
    thread.start()
    return thread


def _watch(trainer, settings, fail):
    runs, since = trainer.session_runs, time.monotonic()
    allowed = settings.startup_timeout + settings.operation_timeout
    while True:
        time.sleep(POLL_SECS)
        if trainer.session_runs != runs:
            runs, since, allowed = trainer.session_runs, time.monotonic(), settings.operation_timeout
        elif time.monotonic() - since > allowed:
            fail(
                f"DeadlineExceededError: no step ended within --operation_timeout={settings.operation_timeout:g}s "
                "(a collective waits on a worker that is gone; TensorFlow 1.15's collectives do not time out, so "
                "this task's watch ended it)"
            )
            return
