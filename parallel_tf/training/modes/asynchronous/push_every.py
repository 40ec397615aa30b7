"""--push_every=n (async): Downpour's n_push (Dean et al., "Large Scale Distributed Deep Networks",
NIPS 2012): a worker sums its gradients and sends the sum every n steps. `updates_by_worker` counts
the pushes."""

from parallel_tf.training.declarations import Flags, Option, flag


class Options(Flags):
    push_every: int = flag(1, "async: send a worker's summed gradients every n steps (Downpour n_push).", lower_bound=1)


OPTION = Option(name="push_every", modes=("async",), options=Options)
