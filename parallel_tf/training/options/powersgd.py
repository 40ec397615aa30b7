"""--powersgd_rank=r (all-reduce): every matrix gradient crosses as two rank-r factors, summed by two
all-reduces, with error feedback and a warm start (graph/powersgd.py; Vogels, Karimireddy, Jaggi,
NeurIPS 2019, as PyTorch DDP's powerSGD_hook runs it). --powersgd_start_step=K: plain all-reduce of
the whole gradients for the first K steps (DDP's start_powerSGD_iter), then PowerSGD.
--powersgd_min_compression=c: only matrices whose factors are c times smaller go as factors (DDP's
min_compression_rate); vectors and small matrices go whole, with the losses. It changes the
arithmetic (a rank-r approximation is applied), with one worker too; runs repeat bitwise.
`powersgd_matrices` in summary.json counts the matrices sent as factors."""

from absl import flags

from parallel_tf.cli import define_float
from parallel_tf.errors import ConfigError
from parallel_tf.graph.powersgd import compressible
from parallel_tf.training.rules import Option


def check_shapes(values, cluster, shapes):
    """A rank that compresses none of the model's matrices would send them all whole."""
    rank, least = values["powersgd_rank"], values["powersgd_min_compression"]
    if not any(compressible(shape, rank, least) for shape in shapes):
        raise ConfigError(
            f"--powersgd_rank={rank} compresses none of the model's matrices by --powersgd_min_compression="
            f"{least:g}: it would send them all whole"
        )


OPTION = Option(
    name="powersgd",
    flags=("powersgd_rank", "powersgd_start_step", "powersgd_min_compression"),
    modes=("allreduce",),
    worker_state=lambda values: True,  # each worker's error, e = M − P Qᵀ
    check_shapes=check_shapes,
    conflicts={
        "compression": "one codec at a time: PowerSGD is one",
        "strict_determinism": "strict determinism gathers whole float32 microbatch gradients, to equal sync "
        "strict bitwise",
        "allreduce_buckets": "PowerSGD sends every matrix's factors in two collectives of their own",
        "allreduce_transport": "PowerSGD sends its factors in float32",
    },
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
