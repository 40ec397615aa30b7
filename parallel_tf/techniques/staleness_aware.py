"""Staleness-aware learning rate (Zhang, Gupta, Lian, Liu, "Staleness-aware Async-SGD for Distributed
Deep Learning", IJCAI 2016), async mode, --staleness_aware: a push of staleness σ (updates applied
since the pusher's fetch, which async mode measures for every push) is applied with learning rate
α / max(σ, 1), so a gradient computed on old parameters moves them less.
"""

from absl import flags

from parallel_tf.compat import tf

MODES = ("async",)
FLAGS = ("staleness_aware",)
IMPLIES = {}


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_bool(
        "staleness_aware",
        False,
        "async: apply each push with learning rate / max(staleness, 1), staleness being the updates applied "
        "since the pushing worker fetched (Zhang et al., IJCAI 2016).",
        flag_values=flag_values,
    )


def enabled(options, cluster):
    return options["staleness_aware"]


def check(options, cluster):
    """Any cluster."""


def push_learning_rate(learning_rate, staleness):
    """The rate a push of `staleness` (an int64 tensor) is applied with."""
    return learning_rate / tf.cast(tf.maximum(staleness, 1), tf.float32)
