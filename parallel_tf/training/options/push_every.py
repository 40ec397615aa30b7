"""--push_every=n (async): Downpour's n_push (Dean et al., "Large Scale Distributed Deep Networks",
NIPS 2012): a worker sums its gradients and sends the sum every n steps. `updates_by_worker` counts
the pushes."""

from absl import flags

from parallel_tf.training.declarations import Option

OPTION = Option(
    name="push_every",
    flags=("push_every",),
    modes=("async",),
)


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_integer(
        "push_every",
        1,
        "async: send a worker's summed gradients every n steps (Downpour n_push).",
        lower_bound=1,
        flag_values=flag_values,
    )
