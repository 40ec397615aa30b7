"""Every declaration's module (or its HOOKS) bound to the interface of each seam it fills (seams.py): mypy, which
./run_tests.sh runs, checks that it has the hook and that its signature is the seam's, so a hook deleted or written to
another signature fails there rather than in the run that first calls it. tests/test_composition.py holds these
bindings to the hooks the declarations name: one for each, named <declaration>_<seam>, and no other."""

from parallel_tf.training import seams
from parallel_tf.training.options import strict_determinism
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

backup_workers_build: seams.Build = backup_workers
local_updates_wrap: seams.Wrap = local_updates
local_updates_after_push: seams.AfterPush = local_updates
staleness_aware_push_learning_rate: seams.PushLearningRate = staleness_aware.HOOKS
staleness_aware_wrap: seams.Wrap = staleness_aware.HOOKS
softsync_send_push: seams.SendPush = softsync.HOOKS
softsync_wrap: seams.Wrap = softsync.HOOKS
bounded_staleness_wrap: seams.Wrap = bounded_staleness.HOOKS
bounded_staleness_after_push: seams.AfterPush = bounded_staleness.HOOKS
delay_compensation_push_gradients: seams.PushGradients = delay_compensation.HOOKS
delay_compensation_wrap: seams.Wrap = delay_compensation.HOOKS
adaptive_delay_compensation_push_gradients: seams.PushGradients = adaptive_delay_compensation.HOOKS
adaptive_delay_compensation_wrap: seams.Wrap = adaptive_delay_compensation.HOOKS
local_sgd_build: seams.Build = local_sgd
easgd_build: seams.Build = easgd
compression_transmit: seams.Transmit = compression.HOOKS
compression_wrap: seams.Wrap = compression.HOOKS
compression_reduce: seams.Reduce = compression.HOOKS
powersgd_wrap: seams.Wrap = powersgd
powersgd_reduce: seams.Reduce = powersgd
clipping_optimizer: seams.Optimizer = clipping.HOOKS
clipping_wrap: seams.Wrap = clipping.HOOKS
stragglers_wrap: seams.Wrap = stragglers
strict_determinism_reduce: seams.Reduce = strict_determinism
