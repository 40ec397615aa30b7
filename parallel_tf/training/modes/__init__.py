"""The modes: each one module with its declaration (`MODE`, a declarations.Mode) and its builder,
build(recipe, dataset, settings) -> TrainGraph (train_graph.py). This list is all that registers one;
--mode's choices, the cluster's checks and the shape flags' scopes are derived from it, and the docs'
modes table is checked against it (tests/test_docs.py). What every mode has (--eval_every, --link_rate,
--worker_delay_ms) a new mode has with no edit elsewhere (declarations.EVERY_MODE). The trainer builds a run's
graph with its mode's builder (trainer.build_graph).
"""

from absl import flags

from parallel_tf.errors import ConfigError
from parallel_tf.training.modes import allreduce, asynchronous, hierarchical, single, sync

CLUSTER_MODES = (sync, asynchronous, hierarchical, allreduce)  # --mode's choices, in this order
SINGLE = single.MODE  # no cluster: the one plain process
BY_NAME = {m.name: m for m in (SINGLE, *(module.MODE for module in CLUSTER_MODES))}
NAMES = tuple(module.MODE.name for module in CLUSTER_MODES)
LOCKSTEP = tuple(name for name in NAMES if BY_NAME[name].lockstep)  # resume on any worker count
OPTIONS = tuple(option for module in CLUSTER_MODES for option in module.MODE.options)  # each mode's own options
# {flag: the modes it applies to} of the cluster shape flags: each mode's own, then --num_ps
SHAPE_FLAGS = {
    **{flag: tuple(n for n in NAMES if flag in BY_NAME[n].flags) for n in NAMES for flag in BY_NAME[n].flags},
    "num_ps": tuple(name for name in NAMES if BY_NAME[name].parameter_servers),
}


def define_own_flags(flag_values=flags.FLAGS):
    """The modes' own cluster-shape flags (hierarchical's --num_groups, --groups)."""
    for module in CLUSTER_MODES:
        if module.MODE.flags:
            module.define_flags(flag_values)


def server_counts(mode, num_ps, num_groups):
    """(central ps, local ps) tasks of a `mode` cluster: --num_ps central ones where the mode has parameter
    servers, and one local ps per group where it has groups."""
    declared = BY_NAME[mode]
    return (num_ps if declared.parameter_servers else 0), (num_groups if declared.groups else 0)


def check_shape_flags(mode, flag_values=flags.FLAGS):
    """Raises ConfigError for a cluster shape flag given for a mode without that kind of task: groups
    outside hierarchical mode, parameter servers in all-reduce."""
    for name, scope in SHAPE_FLAGS.items():
        if not flag_values[name].present or mode in scope:
            continue
        if name == "num_ps":
            raise ConfigError(
                f"--num_ps does not apply to --mode={mode}: its workers {BY_NAME[mode].workers_alone}, "
                "with no parameter server"
            )
        raise ConfigError(f"--{name} applies only to --mode={'|'.join(scope)}, not {mode}")


def check_layout(mode, hosts_known, source, flag_values=flags.FLAGS):
    """Raises ConfigError where `mode`'s flags lay a cluster out on hosts that `source` (Slurm, the launcher,
    a TFJob) cannot: `hosts_known`, whether it says which tasks share a host (hierarchical's --groups=by_host)."""
    if BY_NAME[mode].check_layout:
        BY_NAME[mode].check_layout(hosts_known, source, flag_values)


def check_cluster(mode, cluster):
    """Raises ConfigError unless `cluster`'s shape fits `mode`: a ps job where the mode has parameter
    servers and none where its workers run alone, local ps and groups where it has groups and only there."""
    declared = BY_NAME[mode]
    if declared.workers_alone and cluster.num_ps:
        raise ConfigError(
            f"--mode={mode} runs workers only, which {declared.workers_alone}; the cluster's "
            f'"ps" job ({cluster.num_ps} task(s)) would sit idle: leave it out'
        )
    if declared.parameter_servers and not cluster.num_ps:
        alone = " and ".join(f"--mode={name}" for name in NAMES if BY_NAME[name].workers_alone)
        raise ConfigError(
            f'--mode={mode} needs a parameter server: the cluster has no "ps" job (only {alone} runs workers alone)'
        )
    if declared.groups and not cluster.groups:
        raise ConfigError(
            f'--mode={mode} needs a cluster spec with a "local_ps" job and "groups", e.g. '
            '{"cluster": {"ps": [...], "local_ps": [g0, g1], "worker": [...]}, "groups": [[0, 2], [1, 3]]}'
        )
    if not declared.groups and cluster.groups:
        grouped = "|".join(name for name in NAMES if BY_NAME[name].groups)
        raise ConfigError(f'the cluster has "local_ps" and "groups", which only --mode={grouped} uses, not {mode}')
