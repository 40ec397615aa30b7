"""Delay compensation (DC-ASGD: Zheng, Meng, Wang, Chen, Yu, Ma, Liu, "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017), async mode, --delay_compensation=λ: the parameter servers
keep each worker's parameters as of its last fetch (w_bak) and apply its gradient g as
g + λ·g⊙g⊙(w − w_bak), a first-order correction towards the gradient at the current w, with g⊙g
standing in for the Hessian's diagonal. λ = 0 is plain async. The rule is for one gradient taken at
the fetched w_bak, so it needs --push_every=1 --fetch_every=1 (a pushed sum, or a gradient taken on
a locally updated copy, is neither). With --gradient_compression, g is the decoded gradient the
parameter server received. `compensated_pushes` counts the pushes it corrected, by worker.
"""

from __future__ import annotations

from typing import Any

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.pushes import count_one, push_counter
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph

ONE_GRADIENT = "the compensation is for one gradient taken at the parameters the worker fetched"
COUNTER = "compensated_pushes"


class Options(Flags):
    delay_compensation: float = flag(
        0.0,
        "async: DC-ASGD's λ (Zheng et al., ICML 2017): push g + λ·g·g·(w − w at the worker's fetch); 0: off.",
        valid=(lambda scale: scale >= 0, "λ must be 0 (off) or more"),
    )


TECHNIQUE = Technique(
    name="delay_compensation",
    modes=("async",),
    hooks=("push_gradients", "wrap"),
    requires={"push_every": (1, ONE_GRADIENT), "fetch_every": (1, ONE_GRADIENT)},
    conflicts={"softsync": "softsync applies a push later, after other updates, not at the w it was compensated for"},
    options=Options,
)


class Compensation(OfOneGraph):
    """DC-ASGD's hooks on one graph (DC-ASGD-a's too: adaptive_delay_compensation.py), sharing the count of the
    pushes compensated."""

    def __init__(self) -> None:
        self._pushes: Any = None  # the count by worker, a TensorFlow variable once a push is built

    def push_gradients(self, settings, parameters, sums):
        """(the compensated sums, what backs up this worker's w_bak at each fetch), with λ fixed."""
        scale = settings.options.delay_compensation
        return self.compensate(lambda parameter, gradient: scale, settings, parameters, sums)

    def compensate(self, scale_of, settings, parameters, sums):
        """(g + λ·g⊙g⊙(w − w_bak) for each received sum g, a function of ops `after` giving the ops that back
        up this worker's w_bak once they have run, at each fetch), λ = scale_of(parameter, g), called on the
        parameter's server. Every worker's graph holds every worker's backups, so the chief initialises them
        all; each uses its own row."""
        num_workers, task_index = settings.num_workers, settings.task_index
        compensated, backups = [], []
        with tf.init_scope():  # made outside a loop of steps (train_graph.drive), read in each step
            pushes = self._pushes = push_counter(COUNTER, num_workers)
        counted = count_one(pushes, task_index)
        for parameter, gradient in zip_strict(parameters, sums):
            with tf.device(parameter.device):
                shape = [num_workers, *parameter.shape.as_list()]
                with tf.init_scope():
                    backup = tf.get_variable(
                        f"{parameter.op.name}/fetched_by_worker", shape, parameter.dtype.base_dtype, trainable=False
                    )
                drift = parameter.read_value() - backup.read_value()[task_index]
                with tf.control_dependencies([counted]):
                    compensated.append(gradient + scale_of(parameter, gradient) * gradient * gradient * drift)
                backups.append((backup, parameter))

        def back_up(after):
            ops = []
            for backup, parameter in backups:
                with tf.device(parameter.device), tf.control_dependencies(after):  # on the ps, w never leaving it
                    ops.append(tf.scatter_update(backup, [task_index], tf.expand_dims(parameter.read_value(), 0)))
            return ops

        return compensated, back_up

    def wrap(self, settings, graph):
        """Logs `compensated_pushes`, by worker."""
        return graph.counting({COUNTER: self._pushes} if self._pushes is not None else {})


HOOKS = Compensation()
