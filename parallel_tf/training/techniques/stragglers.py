"""Stragglers on purpose, for studies: --worker_delay_ms=I:MS[,I:MS...] makes worker I pause MS
milliseconds before each of its steps, so techniques for slow workers (backup workers, and the
asynchronous ones) can be compared under a known skew on one machine. Any mode; it changes
timing only, so sync mode trains the same parameters, just slower. In async mode a worker pauses
before it reads its copy (--noprefetch), so a straggler computes on parameters as of its step's start.
A straggler's summary.json counts its pauses (`straggler_pauses`).
"""

import dataclasses
import math

from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import EVERY_CLUSTER_MODE, Flags, Technique, flag


def check(values, cluster):
    """Every worker named is in the cluster (the format is its flag's validator's)."""
    delays(values["worker_delay_ms"], cluster.num_workers)


class Options(Flags):
    worker_delay_ms: str = flag(
        "",
        "Stragglers for studies: I:MS[,I:MS...] makes worker I pause MS milliseconds before each step.",
        parse=lambda text: delays(text, math.inf),
    )


TECHNIQUE = Technique(
    name="stragglers",
    modes=EVERY_CLUSTER_MODE,  # it changes only when a worker starts a step
    options=Options,
    check=check,
    hooks=("wrap",),
    requires={"prefetch": (False, "an async straggler pauses before it reads its copy, as its step begins")},
    conflicts={"steps_per_run": "a straggler's pause is a sleep in Python before each step's session run"},
)


def delays(text, num_workers):
    """{worker index: seconds} from I:MS[,I:MS...]; raises ConfigError naming what is wrong."""
    seconds = {}
    for item in filter(None, text.split(",")):
        index, sep, ms = item.partition(":")
        if not (sep and index.strip().isdigit() and ms.strip().isdigit()):
            raise ConfigError(f"--worker_delay_ms={text}: {item!r} is not WORKER:MILLISECONDS (e.g. 1:50)")
        worker = int(index)
        if worker >= num_workers:
            raise ConfigError(f"--worker_delay_ms={text}: there is no worker {worker} (workers 0-{num_workers - 1})")
        if worker in seconds:
            raise ConfigError(f"--worker_delay_ms={text}: worker {worker} is given twice")
        seconds[worker] = int(ms) / 1000
    return seconds


def wrap(settings, graph):
    pause = delays(settings.options.worker_delay_ms, settings.num_workers).get(settings.task_index, 0)
    return dataclasses.replace(graph, pause_before_step=pause)
