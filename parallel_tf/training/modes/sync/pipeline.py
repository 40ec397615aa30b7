"""--pipeline_pieces=p (sync, ordered): BytePS's pipeline (Jiang et al., "A Unified Architecture for
Accelerating Distributed DNN Training in Heterogeneous GPU/CPU Clusters", OSDI 2020), pushed in backprop's order
as P3 does (Jayarajan et al., "Priority-based Parameter Propagation for Distributed DNN Training", SysML 2019):
each server's share of the model in p pieces, each applied as soon as every worker's gradients of it are in and
pulled by every worker at once, while the later pieces are still pushed (graph/pipeline.py). The sums and the
updates are the plain step's, so the bits are too, at any p and server count, and a resume may change it. A
worker computes on its own copy of the parameters, which its pulls fill. 0 (the default): a step reads every
parameter, then writes every gradient."""

from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import Flags, Option, flag

BY_PIECE = "the pipeline applies each piece as soon as its gradients are in"


def check(values, cluster):
    if values["pipeline_pieces"] and values["optimizer"] == "adam":
        raise ConfigError(
            f"--pipeline_pieces={values['pipeline_pieces']} does not go with --optimizer=adam: Adam counts one update "
            f"of every variable a step (its beta powers), and {BY_PIECE}"
        )


class Options(Flags):
    pipeline_pieces: int = flag(
        0,
        "sync (ordered): cut each parameter server's share into this many pieces, each applied as soon as every "
        "worker's gradients of it are in and pulled at once, while the later pieces are still pushed (BytePS's "
        "pipeline); the same bits. 0: a step reads every parameter, then writes every gradient.",
        lower_bound=0,
    )


OPTION = Option(
    name="pipeline",
    modes=("sync",),
    check=check,
    requires={"aggregation": ("ordered", "SyncReplicasOptimizer applies every variable at once, in arrival order")},
    conflicts={
        "compression": "a codec scales each gradient whole, and the pipeline sends pieces of the variables",
        "clipping": f"the clipping norm is of every gradient, and {BY_PIECE}",
        "backup_workers": "the chief picks a step's first R workers from one queue of arrivals, not one a piece",
        "local_sgd": "local SGD averages the parameters every H steps, and pushes no gradients to pipeline",
        "easgd": "EASGD exchanges parameters with its centre, and pushes no gradients to pipeline",
    },
    timing_only=True,  # the same bits, whatever p
    options=Options,
)
