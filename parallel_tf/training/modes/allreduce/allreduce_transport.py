"""--allreduce_transport=float16|bfloat16 (all-reduce): the gradients cross the ring in half precision,
half the bytes of float32, as Horovod's fp16 compression and PyTorch DDP's fp16 and bf16 hooks send them.
Each worker divides its gradient by N (in float32) and rounds that share to the transport type, as
PyTorch's fp16 hook divides before its all-reduce; the ring adds the N shares in that type, in its fixed
order (so a run repeats bitwise), and the mean comes back to float32 to be applied. The losses the chief
logs go in float32 by a collective of their own, so they are not rounded. With one worker nothing crosses
and nothing is rounded: the run is the one process's. float16 holds up to 65504: the mean of N gradients
near it fits where their sum would not, but a mean above it overflows (the NaN guard then names the
transport); bfloat16 has float32's range and 8 bits of precision. It is the baseline a compression result
on all-reduce should beat: half the bytes for a cast."""

from parallel_tf import compat
from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import Flags, Option, flag


def check(values, cluster):
    """With one worker nothing crosses, so nothing would be rounded to the transport: it would not do what it says;
    and TensorFlow 1.15 cannot sum a half-precision collective on the CPU."""
    transport = values["allreduce_transport"]
    if transport != "float32" and compat.tensorflow_1():
        raise ConfigError(
            f"--allreduce_transport={transport}: TensorFlow 1.15's CollectiveReduce has no {transport} kernel on the "
            "CPU; use float32 there, or TensorFlow 2"
        )
    if transport != "float32" and cluster and cluster.num_workers == 1:
        raise ConfigError(
            f"--allreduce_transport={transport} with one worker: nothing crosses the ring, so nothing would be sent "
            f"or rounded in {transport}; leave it out or run more workers"
        )


class Options(Flags):
    allreduce_transport: str = flag(
        "float32",
        "allreduce: the type the gradients cross the ring in (float16, bfloat16: half the bytes, summed in it).",
        choices=("float32", "float16", "bfloat16"),
    )


OPTION = Option(name="allreduce_transport", modes=("allreduce",), options=Options, check=check, fills=("ring",))
