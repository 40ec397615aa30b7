"""--allreduce_transport=float16|bfloat16 (all-reduce): the gradients cross the ring in half precision,
half the bytes of float32, as Horovod's fp16 compression and PyTorch DDP's fp16 and bf16 hooks send them.
Each worker rounds its gradient to the transport type, the ring adds the N in that type, in its fixed
order (so a run repeats bitwise), and the sum comes back to float32 to be divided by N and applied. The
losses the chief logs go in float32 by a collective of their own, so they are not rounded. With one
worker nothing crosses and nothing is rounded: the run is the one process's. float16 holds up to 65504,
which a sum of large gradients can pass; bfloat16 has float32's range and 8 bits of precision. It is the
baseline a compression result on all-reduce should beat: half the bytes for a cast."""

from absl import flags

from parallel_tf.training.rules import Option

OPTION = Option(
    name="allreduce_transport",
    flags=("allreduce_transport",),
    modes=("allreduce",),
    conflicts={
        "compression": "the codes cross in their own types",
        "strict_determinism": "strict determinism gathers whole float32 microbatch gradients, to equal sync "
        "strict bitwise",
    },
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_enum(
        "allreduce_transport",
        "float32",
        ["float32", "float16", "bfloat16"],
        "allreduce: the type the gradients cross the ring in (float16, bfloat16: half the bytes, summed in it).",
        flag_values=flag_values,
    )
