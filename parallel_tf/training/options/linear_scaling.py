"""--linear_scaling_batch=b (one process, sync and all-reduce): the linear scaling rule (Goyal et al.,
"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017): the rate is --learning_rate times
k = --global_batch_size / b, wherever a rate is used (the optimizer, a local SGD copy's steps). With
--warmup_steps, warm-up goes from the unscaled rate to the scaled one, as the paper's gradual warm-up
does. The chief logs the rate (`scheduled_rate`). The rule scales the rate with the batch an update
averages, which is the global batch only where every update is a lockstep step of all the workers: an
async push applies one worker's B/N examples (summed over --push_every steps), and a hierarchical
group's step its group's, so k = B/b would scale them N times too far; refused there, and with backup
workers, whose update averages R of the N shards."""

from parallel_tf.training.declarations import Flags, Option, flag
from parallel_tf.training.options.warmup import schedule_record


class Options(Flags):
    linear_scaling_batch: int = flag(
        0,
        "The linear scaling rule (Goyal et al. 2017): the rate is --learning_rate times --global_batch_size "
        "over this batch size. 0: off.",
        lower_bound=0,
    )


OPTION = Option(
    name="linear_scaling",
    modes=("single", "sync", "allreduce"),
    why_not_other_modes="the rule scales the rate with the batch an update averages, the global batch only in "
    "lockstep; an async push is one worker's, a hierarchical group's step its group's",
    conflicts={
        "backup_workers": "an update averages the first R workers' shards, R·B/N examples, not the global batch "
        "the rule scales by"
    },
    record=schedule_record,
    options=Options,
)
