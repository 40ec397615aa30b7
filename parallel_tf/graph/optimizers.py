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

from __future__ import annotations

import dataclasses
import math

from parallel_tf.backports import cache
from parallel_tf.compat import tf
from parallel_tf.graph import exact_math, products

# Each update takes its variable's lock (use_locking): async pushes and hierarchical groups' exchanges from
# several workers reach the same parameters at once, and TF1's unlocked update is a read, then a write, which
# loses one of two that overlap. Where one task applies (sync's chief, a copy of its own), the lock is free.
OPTIMIZERS = {
    "sgd": lambda lr: tf.train.GradientDescentOptimizer(lr, use_locking=True),
    "momentum": lambda lr: tf.train.MomentumOptimizer(lr, momentum=0.9, use_locking=True),
    "adagrad": lambda lr: _portable_or_tensorflows("Adagrad")(lr, use_locking=True),
    "adam": lambda lr: _portable_or_tensorflows("Adam")(lr, use_locking=True),
}


def _portable_or_tensorflows(name):
    """Adagrad (Duchi, Hazan, Singer, JMLR 2011; DistBelief's on its parameter servers) or Adam (Kingma and Ba,
    ICLR 2015): TensorFlow's own optimizer with TensorFlow's kernels; with portable ones, its update in exact
    operations (_exact)."""
    return getattr(tf.train, f"{name}Optimizer") if products.tensorflows() else _exact()[name]


@cache
def _exact():
    """TensorFlow's AdagradOptimizer and AdamOptimizer (their slots, names, beta powers and checkpoints), their
    updates in operations of one rounding each and a correctly rounded square root (exact_math.sqrt): TensorFlow's
    ApplyAdagrad computes lr·g·rsqrt(accum), and Eigen's rsqrt runs RSQRTPS, an approximation whose bits differ
    between Intel and AMD (graph/exact_ops.py); its 1.15 computes every float32 sqrt so, ApplyAdam's included.
    Each slot's update is one locked assign_add and the variable's one locked assign_sub, as ApplyAdam's
    arithmetic (m += (g − m)(1 − β1), v += (g² − v)(1 − β2), w −= m·lr_t / (√v + ε)); where several workers apply
    at once (async), the three are not taken as one, as they are in ApplyAdam. tests/test_exact_ops.py works an
    Adagrad update out by hand."""

    class ExactAdagrad(tf.train.AdagradOptimizer):
        def _apply_dense(self, grad, var):
            summed = tf.assign_add(self.get_slot(var, "accumulator"), grad * grad, use_locking=self._use_locking)
            rate = tf.cast(self._learning_rate_tensor, var.dtype.base_dtype)
            return tf.assign_sub(var, (grad * rate) / exact_math.sqrt(summed), use_locking=self._use_locking).op

        _resource_apply_dense = _apply_dense

        def _apply_sparse(self, grad, var):
            return self._apply_dense(tf.convert_to_tensor(grad), var)

    class ExactAdam(tf.train.AdamOptimizer):
        def _apply_dense(self, grad, var):
            dtype, locking = var.dtype.base_dtype, self._use_locking
            rate, beta1, beta2, epsilon = (
                tf.cast(t, dtype) for t in (self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t)
            )
            beta1_power, beta2_power = (tf.cast(t, dtype) for t in self._get_beta_accumulators())
            rate = rate * exact_math.sqrt(1 - beta2_power) / (1 - beta1_power)
            m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
            m_t = tf.assign_add(m, (grad - m) * (1 - beta1), use_locking=locking)
            v_t = tf.assign_add(v, (tf.square(grad) - v) * (1 - beta2), use_locking=locking)
            step = tf.assign_sub(var, (m_t * rate) / (exact_math.sqrt(v_t) + epsilon), use_locking=locking)
            return tf.group(step, m_t, v_t)

        _resource_apply_dense = _apply_dense

        def _apply_sparse(self, grad, var):
            return self._apply_dense(tf.convert_to_tensor(grad), var)

    return {"Adagrad": ExactAdagrad, "Adam": ExactAdam}


def make_optimizer(name, learning_rate):
    return OPTIMIZERS[name](learning_rate)


def optimizer_at(name, learning_rate, global_step):
    """--optimizer `name` at `learning_rate` (a float or a tensor). The rate is made a tensor next to `global_step`,
    where the updates are applied, so it does not cross from the worker with every update."""
    with tf.colocate_with(global_step):
        learning_rate = tf.convert_to_tensor(learning_rate, tf.float32)
    return make_optimizer(name, learning_rate)


def scheduled(name, schedule, global_step):
    """--optimizer `name` at `schedule`'s rate for the updates `global_step` counts. The rate
    is computed where it applies an update, so each step of a loop (train_graph.drive) reads its own global step;
    made once, its slots are the run's (every phase of a run applies through it)."""

    def rate():
        with tf.colocate_with(global_step):
            return tf.convert_to_tensor(schedule.at(global_step), tf.float32)

    return make_optimizer(name, rate)


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
        if self.warmup_steps:
            if self.warmup_from is None:
                rate *= tf.minimum(1.0, (s + 1.0) / self.warmup_steps)
            else:
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
