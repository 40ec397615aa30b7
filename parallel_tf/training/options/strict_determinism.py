"""--strict_determinism (sync and all-reduce): the global batch is always cut into the same
--microbatches, each with its own forward and backward pass, summed by one fixed tree, so every
worker count that divides M trains the same parameters bit for bit (graph/aggregation.py). The
graphs log `microbatch_passes`, the passes each worker makes a step. On all-reduce it owns the reduce hook:
every worker gathers every microbatch's whole gradient and sums them with sync's tree.

It costs M/2 times the ring's bytes on all-reduce: each worker sends its M/N rows to, and gathers (N−1)·M/N
rows from, the others, where the ring moves 2(N−1)/N of one vector each way (8 microbatches, 4 workers:
6 models each way against 1.5)."""

from parallel_tf.errors import ConfigError
from parallel_tf.graph.aggregation import gathered_in_fixed_order
from parallel_tf.graph.collectives import Reducing, Reduction
from parallel_tf.training.declarations import Flags, Option, flag


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


class FixedOrderGather(Reducing):
    """Every microbatch's gradient gathered whole by every worker, summed in microbatch order by sync's tree."""

    def __init__(self, settings, ring):
        self.collectives, self.microbatches = ring.collectives, settings.options.microbatches
        self.passes = self.microbatches // ring.collectives.num_workers

    def reduce(self, gradients) -> Reduction:
        return Reduction(*gathered_in_fixed_order(gradients, self.collectives, self.microbatches))


def reduce(settings, ring, variables):
    """All-reduce's reduce hook: the fixed-order gather, from step 0."""
    return [FixedOrderGather(settings, ring)]


class Options(Flags):
    strict_determinism: bool = flag(
        False, "sync and allreduce: the same parameters, bitwise, for every worker count that divides --microbatches."
    )
    microbatches: int = flag(
        8, "With --strict_determinism: the global batch is always cut into this many.", lower_bound=1
    )


OPTION = Option(
    name="strict_determinism",
    modes=("sync", "allreduce"),
    check=check,
    requires={"aggregation": ("ordered", "it sums in a fixed order")},
    hooks=("reduce",),
    closes={"ring": "strict determinism gathers whole float32 microbatch gradients, to equal sync strict bitwise"},
    options=Options,
)
