"""--steps_per_run=k (the one process; sync, ordered; all-reduce; async, pushing and fetching every step):
k steps in one session run, a tf.while_loop (train_graph.drive), paying a run's RPC rounds once for all of
them, and training the parameters k runs of one step train, bit for bit, whatever the learning-rate
schedule: each step computes its rate from the global step inside the loop, all-reduce's collectives run
inside it in the same order, and an async worker pushes and prefetches in it as a run of one step does
(with several workers, async's order of pushes is timing's, in a loop or not). The trainer logs,
checkpoints and evaluates between runs only; it counts the session runs it made (`session_runs` in
summary.json).

Left unset, it is automatic: the most steps, up to AUTOMATIC_MOST, that divide every interval the
trainer acts at between runs (BETWEEN_RUNS), so a run ends at each log line, evaluation, checkpoint and
snapshot, as Keras's steps_per_execution would if it chose for itself; where k steps a run do not compose
with the rest of the run (a technique that needs Python between steps, the accumulator, --trace_steps, a mode
without a loop), one, and summary.json says why; one too where a loop is slower: sync on a delayed link
(one_step_a_run below). It changes when things can happen, not what is computed, so a resume may run with
another."""

from __future__ import annotations

import functools
import math

from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import Flags, Option, as_flag, flag

BETWEEN_RUNS = ("log_every", "checkpoint_every", "eval_every", "snapshot_every")
# An automatic run trains at most this many steps: 10 take the digits MLP's sync step 1.35x faster at one
# worker and 1.57x at two (BENCHMARKS.md), and a NaN is then named within 10 steps of where it arose.
AUTOMATIC_MOST = 10


def automatic(values):
    """The automatic --steps_per_run of a run with flag `values`: the most steps, up to AUTOMATIC_MOST, that
    divide every interval of BETWEEN_RUNS it has (0: none)."""
    intervals = functools.reduce(math.gcd, (values.get(name) or 0 for name in BETWEEN_RUNS), 0)  # 0 where none
    return max(k for k in range(1, AUTOMATIC_MOST + 1) if intervals % k == 0)


def one_step_a_run(values):
    """Why a run that can loop is faster at one step a run, or "". Sync on a delayed link: each step inside
    the loop waits on one more one-way delay (tools/network_model.py), and the bench measured a run of one
    step 1.05x, 1.12x and 1.12x faster at 2, 10 and 20 ms one way (BENCHMARKS.md, "Latency"); async's and
    all-reduce's loops stay as fast or faster there."""
    if values.get("mode") == "sync" and values.get("link_delay"):
        return (
            f"--link_delay={values['link_delay']:g}: on a delayed link a sync step inside a loop waits on one more "
            "one-way delay than a run of one step"
        )
    return ""


def loop_refusal(on, values, cluster):
    """Why a run whose declarations `on` (composed at one step a run) cannot train values["steps_per_run"] steps
    a run, as the refusal of an explicit k would say it, or "": one of them needs Python between steps (its
    `conflicts` name steps_per_run), the run has a flag at another value than the loop requires, or check
    refuses it (--trace_steps)."""
    for declaration in on:
        why = declaration.conflicts.get(OPTION.name)
        if why:
            return f"{declaration.describe(values)} does not go with {OPTION.describe(values)}: {why}"
    for name, (value, why) in OPTION.requires.items():
        if name in values and values[name] != value:
            return f"{OPTION.describe(values)} needs {as_flag(name, value)}, not {as_flag(name, values[name])}: {why}"
    try:
        check(values, cluster)
    except ConfigError as refusal:
        return str(refusal)
    return ""


def check(values, cluster):
    """What the trainer does between runs must fall between runs."""
    steps = values["steps_per_run"]
    if steps in (None, 1):
        return
    for name in BETWEEN_RUNS:
        if values.get(name, 0) % steps:
            raise ConfigError(
                f"--{name}={values[name]} is not a multiple of --steps_per_run={steps}: the trainer can only log, "
                "checkpoint and evaluate between runs"
            )
    if values.get("trace_steps"):
        raise ConfigError(f"--trace_steps traces session runs, and with --steps_per_run={steps} a run is {steps} steps")


class Options(Flags):
    steps_per_run: int | None = flag(
        None,
        "single, sync (ordered), allreduce and async: train this many steps in one session run (a tf.while_loop), "
        "paying a run's RPC rounds once for all of them; the same parameters, bit for bit. Logs, checkpoints and "
        "evaluations come between runs, so their intervals must be multiples of it. Default: the most, up to "
        f"{AUTOMATIC_MOST}, that divide those intervals, where the run can loop; 1 elsewhere and in sync on a "
        "delayed link (--link_delay), where a run of one step is faster.",
        lower_bound=1,
        kind=int,
    )


OPTION = Option(
    name="steps_per_run",
    modes=("single", "sync", "allreduce", "async"),
    enabled=lambda values, cluster: (values["steps_per_run"] or 1) > 1,
    check=check,
    requires={
        "aggregation": (
            "ordered",
            "SyncReplicasOptimizer's chief applies updates in a run of its own, which a loop of steps cannot hold",
        ),
        "push_every": (1, "async's loop of steps is built for a push every step"),
        "fetch_every": (1, "async's loop of steps is built for a fetch every step"),
        "prefetch": (True, "async's loop of steps fetches at the end of a step, as --prefetch does"),
    },
    timing_only=True,  # the same bits, whatever k
    options=Options,
)
