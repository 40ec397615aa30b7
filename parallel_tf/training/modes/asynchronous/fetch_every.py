"""--fetch_every=n (async): Downpour's n_fetch (Dean et al., "Large Scale Distributed Deep Networks",
NIPS 2012): a worker refreshes its copy of the parameters every n steps (with Downpour's local
updates in between, unless --nolocal_updates). The trainer counts its session runs."""

import dataclasses

from parallel_tf.training.declarations import Option, flag


@dataclasses.dataclass(frozen=True)
class Options:
    """fetch_every's flags, typed: absl's are defined from these fields (declarations.flag)."""

    fetch_every: int = flag(
        1,
        "async: refresh a worker's copy of the parameters every n steps (n_fetch).",
        lower_bound=1,
    )


OPTION = Option(
    name="fetch_every",
    modes=("async",),
    options=Options,
)
