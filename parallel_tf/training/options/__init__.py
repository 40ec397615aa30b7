"""Options: every flag outside the techniques that changes what a run computes, declared as a technique
is (declarations.Option) and written as one module: `OPTION`, its flags (`defines`: typed fields, absl's
defined from them), the modes it applies to, when it is on, what it requires and cannot run with (with the
reason), and its check. The modes, the trainer and graph/ act on the options; rules.compose composes them with
the techniques.

An option whose modes include "single" (the one plain process) is a run option: it applies without a
cluster. The others are mode options: recorded in run.json (a resume must match) and summary.json.

A new option touches its module, a line in OPTIONS, a row in docs/modes-and-techniques.md, a
hand-computed test and its enabling values and observable in tests/test_composition.py.
"""

from absl import flags

from parallel_tf.training.declarations import NO_CLUSTER
from parallel_tf.training.options import (
    aggregation,
    allreduce_buckets,
    allreduce_transport,
    central_every,
    eval_every,
    fetch_every,
    linear_scaling,
    link,
    lr_decay,
    pipeline,
    prefetch,
    push_every,
    steps_per_run,
    strict_determinism,
    warmup,
)

OPTIONS = (
    warmup,
    lr_decay,
    linear_scaling,
    eval_every,
    aggregation,
    strict_determinism,
    steps_per_run,
    push_every,
    fetch_every,
    prefetch,
    pipeline,
    central_every,
    allreduce_buckets,
    allreduce_transport,
    link,
)
BY_NAME = {option.OPTION.name: option for option in OPTIONS}


def is_run_option(option):
    return NO_CLUSTER in option.OPTION.modes


def define_flags(run_options, flag_values=flags.FLAGS):
    """The flags of the run options (`run_options`) or of the mode options."""
    for option in OPTIONS:
        if is_run_option(option) == run_options:
            option.OPTION.define_flags(option.__name__, flag_values)


def flag_scopes(run_options):
    """{flag name: the modes it applies to} for the flags of the run options, or of the mode options."""
    return {name: o.OPTION.modes for o in OPTIONS if is_run_option(o) == run_options for name in o.OPTION.flags}
