"""`Options`: every declared flag's value in one run, each a typed field of its declaration's own `Options` (a
technique's or an option's module: declarations.Flags), so a reader, an IDE and mypy see
`settings.options.powersgd_rank` as powersgd.Options.powersgd_rank, an int. A declaration with flags is a base
here; tests/test_composition.py holds the bases to run_check.DECLARATIONS.
"""

from parallel_tf.training import options, techniques
from parallel_tf.training.modes import allreduce, asynchronous, hierarchical, sync


class Options(
    techniques.backup_workers.Options,
    techniques.local_updates.Options,
    techniques.staleness_aware.Options,
    techniques.softsync.Options,
    techniques.bounded_staleness.Options,
    techniques.delay_compensation.Options,
    techniques.adaptive_delay_compensation.Options,
    techniques.local_sgd.Options,
    techniques.easgd.Options,
    techniques.compression.Options,
    techniques.powersgd.Options,
    techniques.clipping.Options,
    techniques.stragglers.Options,
    options.warmup.Options,
    options.lr_decay.Options,
    options.linear_scaling.Options,
    options.eval_every.Options,
    options.strict_determinism.Options,
    options.steps_per_run.Options,
    options.link.Options,
    sync.aggregation.Options,
    sync.pipeline.Options,
    asynchronous.push_every.Options,
    asynchronous.fetch_every.Options,
    asynchronous.prefetch.Options,
    hierarchical.central_every.Options,
    allreduce.allreduce_buckets.Options,
    allreduce.allreduce_transport.Options,
):
    """The value of every declared flag a run's Settings holds (settings.options), as check_run settled it: a frozen
    dataclass (declarations.Flags) of every base's fields."""
