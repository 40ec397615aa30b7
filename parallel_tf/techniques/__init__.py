"""Techniques: variants of a mode, each switched on by flags of its own and written as one module.

A technique module has
    MODES                       the modes its flags apply to (any other mode refuses them, exit 2)
    FLAGS, define_flags(flag_values=FLAGS)  the names of its flags, and their absl definitions
    IMPLIES                     {flag: value} it needs of other flags: the value when the flag is not
                                given; a different given value is a ConfigError from check()
    enabled(options, cluster)   whether a run with these flag values uses it
    check(options, cluster)     raises ConfigError for a bad combination (`options` here also holds
                                the flags of IMPLIES the user gave)
    spare_workers(options, cluster)  optional: non-chief workers the run may lose and go on
    push_learning_rate(learning_rate, staleness)  optional, async: the rate a push of that
                                staleness (an int64 tensor) is applied with
    push_gradients(options, cluster, task_index, parameters, sums) -> (sums, fetch_ops)
                                optional, async: what a push applies instead of the summed
                                gradients, and ops to run with each fetch
    transmit(options, tensors, destinations) -> tensors
                                optional, sync and async: `tensors` (gradients on this worker) as
                                they reach the parameter servers, each next to its variable in
                                `destinations`, if not as they are (at most one technique may say)
    send_push(settings, cluster, optimizer, sums, parameters, global_step, after) -> Send
                                optional, async: how a push reaches the parameters, if not by
                                the optimizer at once, once op `after` has run (at most one
                                technique may say)
    build(build_mode, recipe, dataset, settings, cluster, task_index) -> TrainGraph
                                optional: wraps the mode's builder (calls it and adds hooks) or
                                replaces it
and a line in TECHNIQUES. `options` maps its flag names to their values (Settings.options). That is
all a new technique touches in the library; it also gets a README row and a hand-computed test.
"""

import functools

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.pushes import Send
from parallel_tf.techniques import (
    backup_workers,
    bounded_staleness,
    compression,
    delay_compensation,
    easgd,
    local_sgd,
    local_updates,
    softsync,
    staleness_aware,
    stragglers,
)

TECHNIQUES = (
    backup_workers,
    local_updates,
    staleness_aware,
    softsync,
    bounded_staleness,
    delay_compensation,
    local_sgd,
    easgd,
    compression,
    stragglers,
)


def define_flags():
    for technique in TECHNIQUES:
        technique.define_flags()


def default_options():
    """{flag name: default} for every technique's flags: the options of a run that gives none of them."""
    scratch = flags.FlagValues()
    for technique in TECHNIQUES:
        technique.define_flags(scratch)
    return {name: scratch[name].default for name in flag_scopes()}


def flag_scopes():
    """{flag name: the modes it applies to} for every technique's flags."""
    return {name: technique.MODES for technique in TECHNIQUES for name in technique.FLAGS}


def enabled(mode, options, cluster):
    return [t for t in TECHNIQUES if mode in t.MODES and t.enabled(options, cluster)]


def check(mode, options, cluster):
    for technique in TECHNIQUES:
        if mode in technique.MODES:
            technique.check(options, cluster)


def implied_flags():
    return {flag for technique in TECHNIQUES for flag in technique.IMPLIES}


def spare_workers(mode, options, cluster):
    """How many non-chief workers a run may lose and go on (backup workers); 0 for most runs."""
    losable = [
        t.spare_workers(options, cluster) for t in enabled(mode, options, cluster) if hasattr(t, "spare_workers")
    ]
    return max(losable, default=0)


def push_learning_rate(settings, cluster, staleness):
    """The learning rate an async push of `staleness` is applied with: --learning_rate, unless a
    technique makes it depend on the staleness."""
    learning_rate = settings.learning_rate
    for technique in enabled(settings.mode, settings.options, cluster):
        if hasattr(technique, "push_learning_rate"):
            learning_rate = technique.push_learning_rate(learning_rate, staleness)
    return learning_rate


def push_gradients(settings, cluster, task_index, parameters, sums):
    """What an async push applies to `parameters` instead of the summed gradients `sums`, and the ops
    each fetch runs besides refreshing the copies: (sums, []) unless a technique changes them."""
    fetch_ops = []
    for technique in enabled(settings.mode, settings.options, cluster):
        if hasattr(technique, "push_gradients"):
            sums, more = technique.push_gradients(settings.options, cluster, task_index, parameters, sums)
            fetch_ops += more
    return sums, fetch_ops


def transmit(settings, cluster, tensors, destinations):
    """Gradients `tensors` of this worker as the parameter servers holding `destinations` receive them:
    as they are, unless a technique encodes them on the way (compression)."""
    for technique in enabled(settings.mode, settings.options, cluster):
        if hasattr(technique, "transmit"):
            return technique.transmit(settings.options, tensors, destinations)
    return tensors


def send_push(settings, cluster, optimizer, sums, parameters, global_step, after):
    """A push, once op `after` has run: `optimizer` applies `sums` to `parameters` at once, unless a
    technique sends them otherwise."""
    for technique in enabled(settings.mode, settings.options, cluster):
        if hasattr(technique, "send_push"):
            return technique.send_push(settings, cluster, optimizer, sums, parameters, global_step, after)
    with tf.control_dependencies([after]):
        return Send(optimizer.apply_gradients(zip(sums, parameters, strict=True), global_step=global_step))


def implied(mode, options, cluster):
    """{flag: value} the run's techniques decide for flags the user did not give."""
    return {flag: value for t in enabled(mode, options, cluster) for flag, value in t.IMPLIES.items()}


def wrap(build_mode):
    """`build_mode`, wrapped by every technique a run's settings switch on."""

    def build(recipe, dataset, settings, cluster, task_index):
        build_run = build_mode
        for technique in enabled(settings.mode, settings.options, cluster):
            if hasattr(technique, "build"):
                build_run = functools.partial(technique.build, build_run)
        return build_run(recipe, dataset, settings, cluster, task_index)

    return build
