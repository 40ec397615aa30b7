"""Hierarchical mode's groups: the flags that lay them out (--num_groups, --groups) and their rules, checked
wherever a cluster is laid out (the launcher, Slurm, a TFJob) as well as by a task."""

from absl import flags

from parallel_tf.errors import ConfigError


def check(values, cluster):
    """Each group's workers take equal slices of the global batch."""
    batch = values["global_batch_size"]
    for g, group in enumerate(cluster.groups):
        if batch % len(group):
            raise ConfigError(
                f"groups[{g}] has {len(group)} workers, which does not divide --global_batch_size={batch}"
            )


def check_groups_by_host(hosts_known, source, flag_values=flags.FLAGS):
    """--groups=by_host's one rule, wherever a cluster is laid out (Slurm, the launcher, a TFJob): one
    group per host, so `source` must say which tasks share a host (`hosts_known`), and the host count
    is the group count, so --num_groups is refused."""
    if flag_values.groups != "by_host":
        return
    if not hosts_known:
        raise ConfigError(f"--groups=by_host: {source} does not say which tasks share a host; use --num_groups")
    if flag_values["num_groups"].present:
        raise ConfigError("--groups=by_host makes one group per host; it does not take --num_groups")


def define_flags(flag_values=flags.FLAGS):
    """How the launcher, a resolver and the manifest writer lay out the groups."""
    flags.DEFINE_integer(
        "num_groups",
        2,
        "hierarchical: worker groups, each with a local ps; worker i joins group i mod G.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "groups",
        "interleaved",
        ["interleaved", "by_host"],
        "hierarchical: interleaved puts worker i in group i mod --num_groups; by_host makes one group per "
        "host (a Slurm node, or a --simulate_hosts host), its local ps and its workers on that host.",
        flag_values=flag_values,
    )
