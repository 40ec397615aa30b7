"""How a run's updates are applied: the optimizer, by --optimizer's name, at a learning rate that follows its
schedule, and optimizers that change what another applies.

The schedule is the rate as a function of the update it is applied at: warm-up, then constant, step or cosine
decay (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017; Loshchilov and
Hutter, "SGDR", ICLR 2017), and the linear scaling rule. Every mode that uses it reads the clock an
update is applied at (sync and all-reduce: the global step; async: the updates applied so far), so a
run resumed from a checkpoint continues the same schedule.

The optimizers that change what another applies delegate all else (its slots, names and checkpoints stay
the wrapped optimizer's): clipping's, a hierarchical group's that sums what it applies, and one that counts
its updates. Not tf.train.Optimizer subclasses: that would import TensorFlow with these modules, and the
launcher, which reads the techniques' declarations, must stay single-threaded."""

import dataclasses
import functools
import math

from parallel_tf.compat import tf
from parallel_tf.graph import products

# Each update takes its variable's lock (use_locking): async pushes and hierarchical groups' exchanges from
# several workers reach the same parameters at once, and TF1's unlocked update is a read, then a write, which
# loses one of two that overlap. Where one task applies (sync's chief, a copy of its own), the lock is free.
OPTIMIZERS = {
    "sgd": lambda lr: tf.train.GradientDescentOptimizer(lr, use_locking=True),
    "momentum": lambda lr: tf.train.MomentumOptimizer(lr, momentum=0.9, use_locking=True),
    "adagrad": lambda lr: _adagrad()(lr, use_locking=True),
    "adam": lambda lr: tf.train.AdamOptimizer(lr, use_locking=True),
}


def _adagrad():
    """Adagrad (Duchi, Hazan, Singer, JMLR 2011; DistBelief's on its parameter servers): TensorFlow's own with
    TensorFlow's kernels; with portable ones, the same update by exact operations (_exact_adagrad)."""
    return tf.train.AdagradOptimizer if products.tensorflows() else _exact_adagrad()


@functools.cache
def _exact_adagrad():
    """TensorFlow's AdagradOptimizer (its accumulator slots, names and checkpoints), its update made exact:
    TensorFlow's ApplyAdagrad computes var -= lr·g·rsqrt(accum), and Eigen's rsqrt runs RSQRTPS, an approximation
    whose bits differ between Intel and AMD (graph/exact_ops.py). ApplyAdagradV2 with epsilon 0 computes
    var -= lr·g / sqrt(accum), a correctly rounded square root and a division: the same update, its bits by IEEE
    arithmetic alone (tests/test_arithmetic.py works one out by hand)."""

    class ExactAdagrad(tf.train.AdagradOptimizer):
        def _update(self, apply, var, grad, **sparse):
            accumulator = self.get_slot(var, "accumulator")
            dtype = var.dtype.base_dtype
            return apply(
                var=var,
                accum=accumulator,
                lr=tf.cast(self._learning_rate_tensor, dtype),
                epsilon=tf.constant(0, dtype),
                grad=grad,
                use_locking=self._use_locking,
                **sparse,
            )

        def _apply_dense(self, grad, var):
            return self._update(tf.raw_ops.ApplyAdagradV2, var, grad)

        def _resource_apply_dense(self, grad, var):
            return self._update(tf.raw_ops.ResourceApplyAdagradV2, var.handle, grad)

        def _apply_sparse(self, grad, var):
            return self._update(tf.raw_ops.SparseApplyAdagradV2, var, grad.values, indices=grad.indices)

        def _resource_apply_sparse(self, grad, var, indices):
            return self._update(tf.raw_ops.ResourceSparseApplyAdagradV2, var.handle, grad, indices=indices)

    return ExactAdagrad


def make_optimizer(name, learning_rate):
    return OPTIMIZERS[name](learning_rate)


def optimizer_at(name, learning_rate, global_step, changes=()):
    """--optimizer `name` at `learning_rate` (a float or a tensor), as each of `changes` (the run's optimizer hooks,
    in order) changes how it applies updates. The rate is made a tensor next to `global_step`, where the updates
    are applied, so it does not cross from the worker with every update."""
    with tf.colocate_with(global_step):
        learning_rate = tf.convert_to_tensor(learning_rate, tf.float32)
    return _changed(make_optimizer(name, learning_rate), changes)


def scheduled(name, schedule, global_step, changes=()):
    """--optimizer `name` at `schedule`'s rate for the updates `global_step` counts, as `changes` change it. The rate
    is computed where it applies an update, so each step of a loop (train_graph.drive) reads its own global step;
    made once, its slots are the run's (every phase of a run applies through it)."""

    def rate():
        with tf.colocate_with(global_step):
            return tf.convert_to_tensor(schedule.at(global_step), tf.float32)

    return _changed(make_optimizer(name, rate), changes)


def _changed(optimizer, changes):
    for change in changes:
        optimizer = change(optimizer)
    return optimizer


SCHEDULES = ("constant", "step", "cosine")


@dataclasses.dataclass(frozen=True)
class Schedule:
    base: float  # the rate after warm-up: --learning_rate, times k = batch / --linear_scaling_batch when set
    kind: str = "constant"
    warmup_steps: int = 0  # W: the rate rises over updates 0..W-1 (see warmup_from)
    decay_steps: int = 0  # step: every D updates, counted from update 0; cosine: over D updates after warm-up
    decay_rate: float = 0.1  # step: the factor at each decay
    milestones: tuple = ()  # step, instead of D: the updates from which one more factor applies
    # Goyal et al.'s gradual warm-up, with linear scaling: from this unscaled rate η to `base` = kη, η + (kη − η)·s/W.
    # None: from 0, base·(s + 1)/W.
    warmup_from: float | None = None

    def __post_init__(self):
        assert self.kind in SCHEDULES, self.kind
        assert self.kind != "step" or bool(self.decay_steps) != bool(self.milestones), "step: D or milestones"

    @property
    def is_constant(self):
        return self.kind == "constant" and not self.warmup_steps

    def at(self, step):
        """The rate at `step` (an integer tensor, or the variable holding it), computed next to it: a plain float
        when it is constant, so a run without a schedule builds the graph it always did. A variable is read
        with read_value(), where the rate is made: its ordinary read is a snapshot made once, outside any loop
        of steps (train_graph.drive), which would give every step of a loop the rate of the run's first."""
        if self.is_constant:
            return self.base
        with tf.colocate_with(step):  # where the step lives and updates are applied: no step crosses to compute it
            if isinstance(step, tf.Variable):
                step = step.read_value()
            return self._scheduled(step)

    def _scheduled(self, step):
        s = tf.cast(step, tf.float32)
        rate = tf.constant(self.base, tf.float32)
        if self.warmup_steps and self.warmup_from is None:
            rate *= tf.minimum(1.0, (s + 1.0) / self.warmup_steps)
        elif self.warmup_steps:
            rate = self.warmup_from + (self.base - self.warmup_from) * tf.minimum(1.0, s / self.warmup_steps)
        if self.kind == "step":
            rate *= tf.pow(self.decay_rate, self._decays(s))
        elif self.kind == "cosine":
            after = tf.maximum(s - self.warmup_steps, 0.0)
            rate *= 0.5 * (1.0 + tf.cos(math.pi * tf.minimum(after, float(self.decay_steps)) / self.decay_steps))
        return rate

    def _decays(self, s):
        """How many decays update `s` has passed, counted from update 0."""
        if self.milestones:
            return tf.add_n([tf.cast(s >= milestone, tf.float32) for milestone in self.milestones])
        return tf.floor(s / self.decay_steps)


class DelegatingOptimizer:
    """`optimizer` itself; a subclass overrides `apply_gradients` to add to what it applies."""

    def __init__(self, optimizer):
        self._optimizer = optimizer

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step, name)

    def get_name(self):
        return self._optimizer.get_name()

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._optimizer.variables()


class CountingOptimizer(DelegatingOptimizer):
    """`optimizer`, adding 1 to an int64 counter `name` (made next to `beside`) with each update it applies."""

    def __init__(self, optimizer, name, beside):
        super().__init__(optimizer)
        with tf.colocate_with(beside):
            self.counter = tf.get_variable(name, [], tf.int64, tf.zeros_initializer(), trainable=False)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        applied = super().apply_gradients(grads_and_vars, global_step, name)
        with tf.colocate_with(self.counter), tf.control_dependencies([applied]):
            return tf.group(applied, self.counter.assign_add(1, use_locking=True))


def apply_then_step(optimizer, grads_and_vars, global_step):
    """`optimizer`'s update, then global_step + 1 under the step's lock: where several workers apply at once
    (async pushes, hierarchical groups), apply_gradients' own increment, unlocked in TF1, loses some (a run of
    6 async workers, 300 steps each, counted 1799 of its 1800 pushes)."""
    applied = optimizer.apply_gradients(grads_and_vars)
    with tf.colocate_with(global_step), tf.control_dependencies([applied]):
        return tf.assign_add(global_step, 1, use_locking=True).op
