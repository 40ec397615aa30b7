"""--powersgd_rank=r (all-reduce): every matrix gradient crosses as two rank-r factors, summed by two
all-reduces, with error feedback and a warm start (graph/powersgd.py; Vogels, Karimireddy, Jaggi,
NeurIPS 2019, as PyTorch DDP's powerSGD_hook runs it). --powersgd_start_step=K: plain all-reduce of
the whole gradients for the first K steps (DDP's start_powerSGD_iter), then PowerSGD.
--powersgd_min_compression=c: only matrices whose factors are c times smaller go as factors (DDP's
min_compression_rate); vectors and small matrices go whole, with the losses. It changes the
arithmetic (a rank-r approximation is applied), with one worker too; runs repeat bitwise.
`powersgd_matrices` in summary.json counts the matrices sent as factors. It owns all-reduce's reduce hook
(rules.py: one way of reducing at a time); its factors cross the ring as the ring's options say
(--allreduce_bucket_mb: factors in buckets; --allreduce_transport: factors in half precision)."""

import dataclasses

from absl import flags

from parallel_tf.cli import define_float
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.collectives import Reducing, Reduction
from parallel_tf.graph.powersgd import LowRank, compressible
from parallel_tf.training.rules import Technique


def check_shapes(values, cluster, shapes):
    """A rank that compresses none of the model's matrices would send them all whole."""
    rank, least = values["powersgd_rank"], values["powersgd_min_compression"]
    if not any(compressible(shape, rank, least) for shape in shapes):
        raise ConfigError(
            f"--powersgd_rank={rank} compresses none of the model's matrices by --powersgd_min_compression="
            f"{least:g}: it would send them all whole"
        )


def reduce(settings, recipe, ring, variables):
    """All-reduce's reduce hook: two phases, the plain ring's steps up to --powersgd_start_step, PowerSGD's from
    there (each kind of step a graph of its own, so what a step sends is counted by its kind)."""
    low_rank = LowRank(
        variables, settings.options.powersgd_rank, settings.options.powersgd_min_compression, settings.seed
    )
    whole = [i for i in range(len(variables)) if i not in low_rank.indices]

    def factored(model, read):
        gradients = tf.gradients(model.loss, read)
        means = dict(zip(low_rank.indices, low_rank.means([gradients[i] for i in low_rank.indices], ring), strict=True))
        whole_means, losses = ring.means([gradients[i] for i in whole], riding=ring.loss_slots(model.loss))
        means.update(zip(whole, whole_means, strict=True))
        return Reduction([means[i] for i in range(len(read))], losses)

    ps, qs = low_rank.factor_specs()
    buckets = ring.count_buckets(ps) + ring.count_buckets(qs) + ring.count_buckets([variables[i] for i in whole])
    compressed = Reducing(settings.options.powersgd_start_step, factored, buckets)
    return [ring.reducing(variables), compressed] if settings.options.powersgd_start_step else [compressed]


def wrap(settings, graph):
    """`powersgd_matrices`: the matrices that cross as factors."""
    rank, least = settings.options.powersgd_rank, settings.options.powersgd_min_compression
    shapes = [v.shape.as_list() for v in tf.trainable_variables()]
    counted = tf.constant(sum(compressible(shape, rank, least) for shape in shapes), tf.int64)
    return dataclasses.replace(graph, counters={**graph.counters, "powersgd_matrices": counted})


TECHNIQUE = Technique(
    name="powersgd",
    flags=("powersgd_rank", "powersgd_start_step", "powersgd_min_compression"),
    modes=("allreduce",),
    hooks=("wrap",),
    reduces=reduce,
    worker_state=lambda values: True,  # each worker's error, e = M − P Qᵀ
    check_shapes=check_shapes,
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_integer(
        "powersgd_rank",
        0,
        "allreduce: every matrix gradient sent as two rank-r factors (PowerSGD, error feedback); 0: off.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "powersgd_start_step",
        0,
        "With --powersgd_rank: plain all-reduce for the first this many steps (DDP's start_powerSGD_iter).",
        lower_bound=0,
        flag_values=flag_values,
    )
    define_float(
        "powersgd_min_compression",
        2.0,
        "With --powersgd_rank: only matrices whose factors are this many times smaller go as factors.",
        lower_bound=1.0,
        flag_values=flag_values,
    )
