"""Every variable's initial values drawn from a seed of its own name, under the run's graph seed.

TensorFlow derives a random initializer's seed, where none is given, from the number of ops the graph
held when the initializer ran, so a model's initial values followed everything built before them: an op
more in one mode's graph, or a variable made in pieces (placement.py), drew other values. Seeded by the
variable's name instead (`seeded`), they are a function of the run's --seed and the model alone, and a
variable made in pieces draws its whole value and keeps its own rows (`whole_then_sliced`): the same
numbers as the variable made whole.
"""

import hashlib

from parallel_tf.compat import tf


def seeded(initializer, name):
    """`initializer` (TensorFlow's default, glorot uniform, where None) with its seed drawn from `name`; one
    without a seed (zeros, a constant) as it is."""
    initializer = tf.glorot_uniform_initializer() if initializer is None else initializer
    config: dict = getattr(initializer, "get_config", dict)()
    if "seed" not in config:
        return initializer
    return type(initializer).from_config({**config, "seed": _seed_of(name)})


def whole_then_sliced(initializer):
    """An initializer that, for a piece of a variable, draws the whole variable's values and keeps its piece's."""

    def initial_value(shape, dtype=None, partition_info=None):
        if partition_info is None:
            return initializer(shape, dtype=dtype)
        whole = initializer(partition_info.full_shape, dtype=dtype)
        return tf.slice(whole, partition_info.var_offset, shape)

    return initial_value


def _seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") >> 1  # a positive int32
