"""--lr_schedule=step|cosine (every mode but hierarchical): the learning rate decays over the run
(graph/optimizers.py). step: times --lr_decay_rate every --lr_decay_steps updates, or at each
of --lr_decay_milestones, counted from the first update (as Goyal et al. 2017 and He et al. 2016
count their drops from epoch 0); cosine (Loshchilov and Hutter, "SGDR", ICLR 2017): to 0 over
--lr_decay_steps updates after warm-up, by default the rest of the run. Updates count in the mode's
clock: global steps, or in async mode the pushes applied (so the default cosine length is the run's
pushes). The chief logs the rate (`scheduled_rate`); summary.json records the schedule and its clock."""

from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import Flags, Option, flag
from parallel_tf.training.options.warmup import NOT_HIERARCHICAL, SCHEDULED_MODES, schedule_record

KINDS = ("constant", "step", "cosine")
DECAY_RATE = 0.1  # --lr_decay_rate's default


def check(values, cluster):
    """Each kind takes its own flags, and a step decay knows when to decay."""
    kind, every, milestones = values["lr_schedule"], values["lr_decay_steps"], values["lr_decay_milestones"]
    if kind == "step" and bool(every) == bool(milestones):
        raise ConfigError("--lr_schedule=step decays every --lr_decay_steps or at --lr_decay_milestones: give one")
    if kind == "cosine" and milestones:
        raise ConfigError("--lr_decay_milestones applies only with --lr_schedule=step")
    if kind == "cosine" and values["lr_decay_rate"] != DECAY_RATE:
        raise ConfigError("--lr_decay_rate applies only with --lr_schedule=step; cosine decays to 0")


def _whole_and_increasing(values):
    if not all(v.strip().isdigit() and int(v) > 0 for v in values):
        return False
    numbers = [int(v) for v in values]
    return all(a < b for a, b in zip(numbers, numbers[1:]))


class Options(Flags):
    lr_schedule: str = flag(
        "constant",
        "The learning rate's decay: constant, step (times --lr_decay_rate every --lr_decay_steps updates, or "
        "at --lr_decay_milestones, from the first update) or cosine (to 0 over --lr_decay_steps after warm-up, "
        "default the rest of the run). Not hierarchical.",
        choices=KINDS,
    )
    lr_decay_steps: int = flag(
        0, "step: the interval of each decay; cosine: its length (0: to the last update).", lower_bound=0
    )
    lr_decay_rate: float = flag(DECAY_RATE, "step: the factor of each decay.", lower_bound=0.0, upper_bound=1.0)
    lr_decay_milestones: tuple = flag(
        [],
        "step: the updates at which the rate is multiplied by --lr_decay_rate, e.g. 3000,6000,8000 (increasing).",
        valid=(_whole_and_increasing, "must be positive whole numbers in increasing order"),
    )


OPTION = Option(
    name="lr_decay",
    modes=SCHEDULED_MODES,
    check=check,
    switched_on_by="--lr_schedule=step or cosine",
    why_not_other_modes=NOT_HIERARCHICAL,
    record=schedule_record,
    options=Options,
)
