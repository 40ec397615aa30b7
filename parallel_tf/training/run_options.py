"""`Options`: every declared flag's value in one run, each a typed field of its declaration's own `Options` (a
technique's or an option's module, declarations.flag), so a reader, an IDE and mypy see
`settings.options.powersgd_rank` as powersgd.Options.powersgd_rank, an int. A declaration with flags is a base
here; tests/test_composition.py holds the bases to run_check.DECLARATIONS.
"""

import dataclasses

from parallel_tf.training.modes.allreduce import allreduce_buckets, allreduce_transport
from parallel_tf.training.modes.asynchronous import fetch_every, prefetch, push_every
from parallel_tf.training.modes.hierarchical import central_every
from parallel_tf.training.modes.sync import aggregation, pipeline
from parallel_tf.training.options import (
    eval_every,
    linear_scaling,
    link,
    lr_decay,
    steps_per_run,
    strict_determinism,
    warmup,
)
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


@dataclasses.dataclass(frozen=True)
class Options(
    backup_workers.Options,
    local_updates.Options,
    staleness_aware.Options,
    softsync.Options,
    bounded_staleness.Options,
    delay_compensation.Options,
    adaptive_delay_compensation.Options,
    local_sgd.Options,
    easgd.Options,
    compression.Options,
    powersgd.Options,
    clipping.Options,
    stragglers.Options,
    warmup.Options,
    lr_decay.Options,
    linear_scaling.Options,
    eval_every.Options,
    strict_determinism.Options,
    steps_per_run.Options,
    link.Options,
    aggregation.Options,
    pipeline.Options,
    push_every.Options,
    fetch_every.Options,
    prefetch.Options,
    central_every.Options,
    allreduce_buckets.Options,
    allreduce_transport.Options,
):
    """The value of every declared flag a run's Settings holds (settings.options), as check_run settled it."""
