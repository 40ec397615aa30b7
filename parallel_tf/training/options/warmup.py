"""--warmup_steps=W (every mode but hierarchical): the learning rate rises over the first W updates
(graph/optimizers.py): from 0 to --learning_rate, base·(s+1)/W at update s; with the linear
scaling rule, Goyal et al.'s gradual warm-up ("Accurate, Large Minibatch SGD: Training ImageNet in
1 Hour", 2017) from the unscaled rate η to the scaled kη, η + (k−1)η·s/W. Updates count in the mode's
clock: global steps, or in async mode the pushes applied. The chief logs the rate (`scheduled_rate`)."""

import dataclasses

from parallel_tf.training.declarations import Flags, Option, flag

SCHEDULED_MODES = ("single", "sync", "async", "allreduce")
NOT_HIERARCHICAL = (
    "hierarchical groups and the central ps count their steps apart, and a schedule needs the one step an "
    "update is applied at"
)


def schedule_record(settings):
    """What the learning-rate options made (summary.json): the schedule, and how many updates the run applies
    in the clock it counts."""
    return {
        **dataclasses.asdict(settings.schedule),
        "clock": settings.clock,
        "updates_in_run": settings.updates_in_run,
    }


class Options(Flags):
    warmup_steps: int = flag(
        0,
        "The rate rises linearly over this many updates: from 0 to --learning_rate, or with "
        "--linear_scaling_batch from --learning_rate to the scaled rate (Goyal et al. 2017). Not hierarchical.",
        lower_bound=0,
    )


OPTION = Option(
    name="warmup", modes=SCHEDULED_MODES, options=Options, why_not_other_modes=NOT_HIERARCHICAL, record=schedule_record
)
