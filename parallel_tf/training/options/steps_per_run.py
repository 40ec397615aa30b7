"""--steps_per_run=k (sync, ordered): k steps in one session run, a tf.while_loop (graph/loops.py),
paying a run's RPC rounds once for all of them, and training the parameters k runs of one step
train, bit for bit, whatever the learning-rate schedule: each step computes its rate from the
global step inside the loop. The trainer logs, checkpoints and evaluates between runs only; it
counts the session runs it made (`session_runs` in summary.json)."""

from absl import flags

from parallel_tf.errors import ConfigError
from parallel_tf.training.rules import EVERY_TECHNIQUE, Option

BETWEEN_RUNS = ("log_every", "checkpoint_every", "eval_every", "snapshot_every")


def check(values, cluster):
    """What the trainer does between runs must fall between runs."""
    steps = values["steps_per_run"]
    if steps == 1:
        return
    for name in BETWEEN_RUNS:
        if values.get(name, 0) % steps:
            raise ConfigError(
                f"--{name}={values[name]} is not a multiple of --steps_per_run={steps}: the trainer can only log, "
                "checkpoint and evaluate between runs"
            )
    if values.get("trace_steps"):
        raise ConfigError(f"--trace_steps traces session runs, and with --steps_per_run={steps} a run is {steps} steps")


OPTION = Option(
    name="steps_per_run",
    flags=("steps_per_run",),
    modes=("sync",),
    check=check,
    requires={
        "aggregation": (
            "ordered",
            "SyncReplicasOptimizer's chief applies updates in a run of its own, which a loop of steps cannot hold",
        )
    },
    conflicts={
        EVERY_TECHNIQUE: "a loop of steps is built for the plain ordered step only, and each technique changes it "
        "between steps"
    },
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_integer(
        "steps_per_run",
        1,
        "sync, ordered: train this many steps in one session run (a tf.while_loop), paying a run's RPC rounds "
        "once for all of them; the same parameters, bit for bit. Logs, checkpoints and evaluations come "
        "between runs, so their intervals must be multiples of it.",
        lower_bound=1,
        flag_values=flag_values,
    )
