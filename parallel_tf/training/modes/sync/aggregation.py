"""--aggregation (sync): how a step's gradients are added up. ordered (the default, graph/aggregation.py)
sums them in a fixed order, so repeats are bitwise at any worker count; accumulator hands them to
TensorFlow's SyncReplicasOptimizer (Chen et al., "Revisiting Distributed Synchronous SGD", 2016, as
TensorFlow built it), which adds them in arrival order: kept to compare against. Its chief counts the
updates it applies (`accumulator_updates`)."""

from parallel_tf.training.declarations import Flags, Option, flag


class Options(Flags):
    aggregation: str = flag(
        "ordered",
        "sync: sum gradients in a fixed order (bitwise repeats at any worker count), or in arrival order "
        "with SyncReplicasOptimizer.",
        choices=("ordered", "accumulator"),
    )


OPTION = Option(name="aggregation", modes=("sync",), options=Options)
