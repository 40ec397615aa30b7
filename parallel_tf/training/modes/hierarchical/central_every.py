"""--central_every=k (hierarchical): a group sends its summed update to the central parameter servers
every k group steps (modes/hierarchical/__init__.py). The central ps applies the sum as one step, which is the
group's k steps only for plain SGD. `central_exchanges_by_group` counts the exchanges."""

from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import Flags, Option, flag


def check(values, cluster):
    every, optimizer = values["central_every"], values["optimizer"]
    if every > 1 and optimizer != "sgd":
        raise ConfigError(
            f"--central_every={every} with --optimizer={optimizer}: the central ps would take one {optimizer} step "
            f"on the group's summed gradients, not the group's {every} steps, and their state would differ; use "
            "--optimizer=sgd (whose steps add up) or --central_every=1"
        )


class Options(Flags):
    central_every: int = flag(
        1, "hierarchical: a group sends its update to the central ps every k steps.", lower_bound=1
    )


OPTION = Option(name="central_every", modes=("hierarchical",), options=Options, check=check)
