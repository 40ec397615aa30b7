"""Techniques: variants of a mode, each switched on by flags of its own and written as one module.

A technique module has
    Options                     its flags, the typed `flag` fields of a declarations.Flags subclass, from
                                which absl's are defined
    TECHNIQUE                   its declaration (training/declarations.Technique): modes, `options`, when it is on
                                (`enabled`, where it is not "its first flag left its default"), the check
                                of its flags' values if they need one, the flags it requires, what it
                                cannot run with and why, its hooks, whether it builds the mode's graph,
                                the workers a run may lose (`spare_workers`). How declarations compose is
                                rules.py's to say.
and the hooks it declares: functions of the module named after the seam each fills, with that seam's signature
(training/seams.py: build, wrap, transmit, optimizer, push_learning_rate, push_gradients, send_push, after_push,
and all-reduce's reduce), which a step calls on what settings.hooks holds, and a line in TECHNIQUES. Hooks that
share graph state (SSP's clocks, compression's payloads, clipping's counter) are instead methods of a
seams.OfOneGraph, the module's `HOOKS`, which holds that state: every graph is built with a fresh one. A declared
flag's value is a field of the run's Settings.options. That, a line for each hook in training/hook_types.py
(mypy checks the hook against its seam) and one for its Options in training/run_options.py, is all a new technique
touches in the library; it also gets a row in
docs/modes-and-techniques.md, a hand-computed test and an observable in tests/test_composition.py.
"""

from absl import flags

from parallel_tf.training.techniques import (
    adaptive_delay_compensation,
    backup_workers,
    bounded_staleness,
    clipping,
    compression,
    delay_compensation,
    easgd,
    local_sgd,
    local_updates,
    powersgd,
    softsync,
    staleness_aware,
    stragglers,
)

# The wrapping order (rules.py): `wrap` hooks apply in this order, innermost first (trainer.build_graph).
TECHNIQUES = (
    backup_workers,
    local_updates,
    staleness_aware,
    softsync,
    bounded_staleness,
    delay_compensation,
    adaptive_delay_compensation,
    local_sgd,
    easgd,
    compression,
    powersgd,
    clipping,
    stragglers,
)
BY_NAME = {t.TECHNIQUE.name: t for t in TECHNIQUES}


def define_flags(flag_values=flags.FLAGS):
    for technique in TECHNIQUES:
        technique.TECHNIQUE.define_flags(technique.__name__, flag_values)


def flag_scopes():
    """{flag name: the modes it applies to} for every technique's flags."""
    return {name: t.TECHNIQUE.modes for t in TECHNIQUES for name in t.TECHNIQUE.flags}


def spare_workers(names, values, cluster):
    """How many non-chief workers a run of techniques `names` with flag `values` may lose and go on (backup
    workers); most 0."""
    declared = [BY_NAME[name].TECHNIQUE for name in names]
    return max((d.spare_workers(values, cluster) for d in declared if d.spare_workers), default=0)
