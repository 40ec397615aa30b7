"""--fetch_every=n (async): Downpour's n_fetch (Dean et al., "Large Scale Distributed Deep Networks",
NIPS 2012): a worker refreshes its copy of the parameters every n steps (with Downpour's local
updates in between, unless --nolocal_updates). The trainer counts its session runs."""

from parallel_tf.training.declarations import Flags, Option, flag


class Options(Flags):
    fetch_every: int = flag(
        1, "async: refresh a worker's copy of the parameters every n steps (n_fetch).", lower_bound=1
    )


OPTION = Option(name="fetch_every", modes=("async",), options=Options)
