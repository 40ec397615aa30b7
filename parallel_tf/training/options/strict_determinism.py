"""--strict_determinism (sync and all-reduce): the global batch is always cut into the same
--microbatches, each with its own forward and backward pass, summed by one fixed tree, so every
worker count that divides M trains the same parameters bit for bit (graph/aggregation.py). The
graphs log `microbatch_passes`, the passes each worker makes a step."""

from absl import flags

from parallel_tf.errors import ConfigError
from parallel_tf.training.rules import Option


def check(values, cluster):
    """Whole microbatches: M divides the global batch, and the worker count divides M."""
    if not values["strict_determinism"]:
        return
    microbatches, batch = values["microbatches"], values["global_batch_size"]
    if batch % microbatches:
        raise ConfigError(f"--microbatches={microbatches} does not divide --global_batch_size={batch}")
    if microbatches % cluster.num_workers:
        raise ConfigError(
            f"--microbatches={microbatches} is not divisible by the worker count {cluster.num_workers}; "
            "strict determinism needs whole microbatches per worker"
        )


OPTION = Option(
    name="strict_determinism",
    flags=("strict_determinism", "microbatches"),
    modes=("sync", "allreduce"),
    check=check,
    requires={"aggregation": ("ordered", "it sums in a fixed order")},
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_bool(
        "strict_determinism",
        False,
        "sync and allreduce: the same parameters, bitwise, for every worker count that divides --microbatches.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "microbatches",
        8,
        "With --strict_determinism: the global batch is always cut into this many.",
        lower_bound=1,
        flag_values=flag_values,
    )
