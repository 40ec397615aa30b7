"""Delay compensation (DC-ASGD: Zheng, Meng, Wang, Chen, Yu, Ma, Liu, "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017), async mode, --delay_compensation=λ: the parameter servers
keep each worker's parameters as of its last fetch (w_bak) and apply its gradient g as
g + λ·g⊙g⊙(w − w_bak), a first-order correction towards the gradient at the current w, with g⊙g
standing in for the Hessian's diagonal. λ = 0 is plain async. Meant for --push_every=1: with more, the
pushed sum is compensated as one gradient.
"""

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

MODES = ("async",)
FLAGS = ("delay_compensation",)
IMPLIES = {}


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_float(
        "delay_compensation",
        0.0,
        "async: DC-ASGD's λ (Zheng et al., ICML 2017): push g + λ·g·g·(w − w at the worker's fetch); 0: off.",
        flag_values=flag_values,
    )


def enabled(options, cluster):
    return options["delay_compensation"] > 0


def check(options, cluster):
    if options["delay_compensation"] < 0:
        raise ConfigError(f"--delay_compensation={options['delay_compensation']}: λ must be 0 (off) or more")


def push_gradients(options, cluster, task_index, parameters, sums):
    """(the compensated sums, the ops that back up this worker's w_bak at each fetch). Every worker's
    graph holds every worker's backups, so the chief initialises them all; each uses its own row."""
    scale = options["delay_compensation"]
    compensated, backups = [], []
    for parameter, gradient in zip(parameters, sums, strict=True):
        with tf.device(parameter.device):
            shape = [cluster.num_workers, *parameter.shape.as_list()]
            backup = tf.get_variable(
                f"{parameter.op.name}/fetched_by_worker", shape, parameter.dtype.base_dtype, trainable=False
            )
            drift = parameter.read_value() - backup[task_index]
            compensated.append(gradient + scale * gradient * gradient * drift)
            backups.append(tf.scatter_update(backup, [task_index], tf.expand_dims(parameter.read_value(), 0)))
    return compensated, backups
