"""Options: every flag outside the techniques that changes what a run computes, declared as a technique
is (declarations.Option) and written as one module: its flags (`Options`: typed fields, absl's defined from
them) and `OPTION`, the modes it applies to, when it is on, what it requires and cannot run with (with the
reason), and its check. The modes, the trainer and graph/ act on the options; rules.compose composes them with
the techniques. Here are the options more than one mode shares; an option of one mode only is its mode's, in
its package (modes/sync/aggregation.py, modes/asynchronous/push_every.py, ...: Mode.options).

An option whose modes include "single" (the one plain process) is a run option: it applies without a
cluster. The others are mode options: recorded in run.json (a resume must match) and summary.json.

A new option touches its module, a line in OPTIONS (or its mode's Mode.options), one in training/run_options.py,
a row in
docs/modes-and-techniques.md, a hand-computed test and its enabling values and observable in
tests/test_composition.py.
"""

from absl import flags

from parallel_tf.training.declarations import NO_CLUSTER
from parallel_tf.training.options import (
    eval_every,
    linear_scaling,
    link,
    lr_decay,
    steps_per_run,
    strict_determinism,
    warmup,
)

OPTIONS = (warmup, lr_decay, linear_scaling, eval_every, strict_determinism, steps_per_run, link)


def is_run_option(option):
    return NO_CLUSTER in option.OPTION.modes


def define_flags(modules, run_options, flag_values=flags.FLAGS):
    """The flags of the run options (`run_options`) or of the mode options among option `modules`."""
    for option in modules:
        if is_run_option(option) == run_options:
            option.OPTION.define_flags(option.__name__, flag_values)


def flag_scopes(modules, run_options):
    """{flag name: the modes it applies to} of the run options' flags, or of the mode options', among `modules`."""
    return {name: o.OPTION.modes for o in modules if is_run_option(o) == run_options for name in o.OPTION.flags}
