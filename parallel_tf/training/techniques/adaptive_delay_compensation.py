"""Adaptive delay compensation (DC-ASGD-a: Zheng, Meng, Wang, Chen, Yu, Ma, Liu, "Asynchronous Stochastic
Gradient Descent with Delay Compensation", ICML 2017, section 5), async mode,
--adaptive_delay_compensation=λ0: DC-ASGD (delay_compensation.py) with its λ set per element from the
gradients' running scale, so one λ0 suits gradients large and small. Each parameter server keeps, per
element, a moving average of the squared gradients it received (from every worker):
    MeanSquare ← m·MeanSquare + (1 − m)·g⊙g           m = 0.95, the paper's
and applies g + λ0/√(MeanSquare + ε) ⊙ g⊙g⊙(w − w_bak), with ε = 1e-7 against an element no gradient
has moved yet. MeanSquare starts at 0 and takes each push before the push is compensated. Pushes from
different workers update it as they arrive, without a lock, as every async push updates w.
The requirements and conflicts are DC-ASGD's: the two compensate the same way, so a run uses one.
"""

from parallel_tf.compat import tf
from parallel_tf.graph import exact_math, exact_ops
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.techniques import delay_compensation

MEAN_SQUARE_DECAY = 0.95
EPSILON = 1e-7


class Options(Flags):
    adaptive_delay_compensation: float = flag(
        0.0,
        "async: DC-ASGD-a's λ0 (Zheng et al., ICML 2017): DC-ASGD with λ = λ0/√(a moving average of g·g), "
        "per element, on the parameter servers; 0: off.",
        valid=(lambda scale: scale >= 0, "λ0 must be 0 (off) or more"),
    )


TECHNIQUE = Technique(
    name="adaptive_delay_compensation",
    modes=("async",),
    hooks=("push_gradients", "wrap"),
    requires=delay_compensation.TECHNIQUE.requires,
    conflicts={
        **delay_compensation.TECHNIQUE.conflicts,
        "delay_compensation": "both compensate a push for its delay, one with λ fixed, the other with λ adapted; "
        "choose one",
    },
    options=Options,
)


class AdaptiveCompensation(delay_compensation.Compensation):
    """DC-ASGD-a's hooks on one graph: DC-ASGD's, with its λ adapted."""

    def push_gradients(self, settings, parameters, sums):
        """DC-ASGD's compensation (Compensation.compensate) with λ = λ0/√(MeanSquare + ε)."""
        initial_scale = settings.options.adaptive_delay_compensation

        def adapted_scale(parameter, gradient):
            with tf.init_scope():  # made outside a loop of steps (train_graph.drive), read in each step
                mean_square = tf.get_variable(
                    f"{parameter.op.name}/mean_square_gradient",
                    parameter.shape,
                    parameter.dtype.base_dtype,
                    tf.zeros_initializer(),
                    trainable=False,
                )
            averaged = MEAN_SQUARE_DECAY * mean_square.read_value() + (1 - MEAN_SQUARE_DECAY) * gradient * gradient
            # written whole under the lock; two pushes that overlap both read the old value, and the later drops the
            # other's g⊙g (docs/modes-and-techniques.md: an exact average needs a critical section around the read)
            taken = mean_square.assign(averaged, use_locking=True)
            return exact_ops.quotient(initial_scale, exact_math.sqrt(taken + EPSILON))

        return self.compensate(adapted_scale, settings, parameters, sums)


HOOKS = AdaptiveCompensation()
