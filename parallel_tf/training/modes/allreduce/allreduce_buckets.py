"""--allreduce_bucket_mb=X (all-reduce): the gradients go in buckets of about X MB, last layer first, one
collective each, as PyTorch DDP's buckets (Li et al., "PyTorch Distributed", VLDB 2020): a bucket's
collective depends only on its own gradients, so it can cross the network while backprop still
computes the earlier layers' (seed 001: overlap communication with computation). A bucket closes once
it holds X MB, so the boundaries are fixed by the model and a run repeats bitwise; with 1 or 2 workers
each element's sum is a + b whatever its bucket, so the run equals the one-collective run bitwise; with
more, the ring adds an element in an order set by its place in its bucket, which buckets move. 0 (the
default): one collective for all. `allreduce_buckets` in summary.json counts them."""

from parallel_tf.training.declarations import Flags, Option, flag


class Options(Flags):
    allreduce_bucket_mb: float = flag(
        0.0,
        "allreduce: one collective per bucket of about this many MB of gradients, last layer first, each sent "
        "as soon as its gradients exist; 0: one collective for all.",
        lower_bound=0.0,
    )


OPTION = Option(name="allreduce_buckets", modes=("allreduce",), options=Options, fills=("ring",))
