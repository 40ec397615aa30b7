"""The learning rate as a function of the global step: warm-up, then constant, step or cosine decay
(Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017; Loshchilov and
Hutter, "SGDR", ICLR 2017), and the linear scaling rule. Every mode that uses it reads the step an
update is applied at (sync: the global batch; async: the pushes applied so far), so a run resumed
from a checkpoint continues the same schedule.
"""

import dataclasses
import math

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

SCHEDULES = ("constant", "step", "cosine")
STEP_WITHOUT_INTERVAL = "--lr_schedule=step decays every --lr_decay_steps steps: give it"


@dataclasses.dataclass(frozen=True)
class Schedule:
    base: float  # --learning_rate, times global batch / --linear_scaling_batch when that is set
    kind: str = "constant"
    warmup_steps: int = 0  # the rate rises linearly to `base` over steps 0..W-1: base (s + 1) / W
    decay_steps: int = 0  # step: every D steps after warm-up; cosine: over D steps after warm-up
    decay_rate: float = 0.1  # step: the factor each D steps

    def __post_init__(self):
        if self.kind == "step" and self.decay_steps < 1:
            raise ConfigError(STEP_WITHOUT_INTERVAL)

    @property
    def is_constant(self):
        return self.kind == "constant" and not self.warmup_steps

    def at(self, step):
        """The rate at `step` (an integer tensor), computed next to it: a plain float when it is constant, so
        a run without a schedule builds the graph it always did."""
        if self.is_constant:
            return self.base
        with tf.colocate_with(step):  # where the step lives and updates are applied: no step crosses to compute it
            return self._scheduled(step)

    def _scheduled(self, step):
        s = tf.cast(step, tf.float32)
        after = tf.maximum(s - self.warmup_steps, 0.0)
        rate = tf.constant(self.base, tf.float32)
        if self.warmup_steps:
            rate *= tf.minimum(1.0, (s + 1.0) / self.warmup_steps)
        if self.kind == "step":
            rate *= tf.pow(self.decay_rate, tf.floor(after / self.decay_steps))
        elif self.kind == "cosine":
            rate *= 0.5 * (1.0 + tf.cos(math.pi * tf.minimum(after, float(self.decay_steps)) / self.decay_steps))
        return rate
