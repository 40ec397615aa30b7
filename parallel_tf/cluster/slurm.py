"""The cluster of a Slurm job step, from the environment `srun` gives each task.

TensorFlow's own SlurmClusterResolver sorts host names as strings (n10 before n9), assumes
block distribution, refuses CPU-only nodes and overwrites Slurm's CUDA_VISIBLE_DEVICES. This
one keeps Slurm's node order, follows block and cyclic distribution, needs no GPU, and narrows
Slurm's own GPU list rather than replacing it.

Rank r of the step (SLURM_PROCID) listens on port --port_base + its index on its node. Jobs take
ranks in start order: the central ps tasks first, then (hierarchical) one local ps per group,
then the workers; the first worker is the chief.
"""

import dataclasses
import itertools
import re

from parallel_tf.backports import zip_strict
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError

DISTRIBUTIONS = ("block", "cyclic")


@dataclasses.dataclass(frozen=True)
class Placement:
    """What the step's environment says about this task and the whole cluster."""

    cluster: cluster_lib.ClusterConfig
    job_name: str
    task_index: int


def expand_hostlist(hostlist):
    """Slurm's compressed host list, e.g. 'n[08-11],gpu[1,3]', as names in Slurm's own order."""
    hosts: list = []
    for item in _top_level_items(hostlist):
        parts = re.split(r"(\[[^\]]*\])", item)
        choices = [_expand_ranges(part[1:-1], hostlist) if part.startswith("[") else [part] for part in parts]
        hosts.extend("".join(names) for names in itertools.product(*choices))
    if not hosts:
        raise ConfigError(f"Slurm host list {hostlist!r} names no host")
    return hosts


def _top_level_items(hostlist):
    """Splits on the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(hostlist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ConfigError(f"Slurm host list {hostlist!r}: unbalanced brackets")
        if char == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"Slurm host list {hostlist!r}: unbalanced brackets")
    return [item for item in [*items, hostlist[start:]] if item]


def _expand_ranges(ranges, hostlist):
    """'01-03,05' -> ['01', '02', '03', '05']: zero padding kept, as Slurm writes it."""
    names: list = []
    for piece in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
        if not match or (match[2] and int(match[2]) < int(match[1])):
            raise ConfigError(f"Slurm host list {hostlist!r}: {piece!r} is not a number or a rising range")
        first, last = match[1], match[2] or match[1]
        names.extend(str(n).zfill(len(first)) for n in range(int(first), int(last) + 1))
    return names


def expand_tasks_per_node(counts):
    """SLURM_STEP_TASKS_PER_NODE, e.g. '3(x2),2,1' -> [3, 3, 2, 1]."""
    expanded = []
    for piece in counts.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", piece.strip())
        if not match:
            raise ConfigError(f"SLURM_STEP_TASKS_PER_NODE={counts!r}: {piece!r} is not N or N(xM)")
        expanded.extend([int(match[1])] * int(match[2] or 1))
    return expanded


def node_of_each_rank(tasks_per_node, distribution):
    """The node index of every rank: block fills node 0 first; cyclic deals ranks out one per node
    in turn, skipping nodes that are full."""
    if distribution == "block":
        return [node for node, count in enumerate(tasks_per_node) for _ in range(count)]
    left = list(tasks_per_node)
    nodes = []
    while any(left):
        for node, count in enumerate(left):
            if count:
                nodes.append(node)
                left[node] -= 1
    return nodes


def placement(environ, num_ps, num_groups, port_base, groups="interleaved"):
    """This task's Placement from Slurm's variables; ConfigError naming the variable that is wrong.
    `num_ps` and `num_groups` are the mode's server counts (training.modes.server_counts).
    With groups="by_host" (hierarchical), one group per node: see cluster.assign_jobs_by_host."""
    hosts = expand_hostlist(_first_of(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    tasks_per_node = expand_tasks_per_node(_first_of(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
    if len(tasks_per_node) != len(hosts):
        raise ConfigError(
            f"Slurm gives {len(hosts)} node(s) ({', '.join(hosts)}) but task counts for {len(tasks_per_node)}"
        )
    num_tasks = _integer(environ, _first_name(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
    if num_tasks != sum(tasks_per_node):
        raise ConfigError(f"Slurm says {num_tasks} tasks but its tasks per node add up to {sum(tasks_per_node)}")
    rank = _integer(environ, "SLURM_PROCID")
    if not 0 <= rank < num_tasks:
        raise ConfigError(f"SLURM_PROCID={rank} is not a rank of a {num_tasks}-task step")
    distribution = _distribution(environ)
    nodes = node_of_each_rank(tasks_per_node, distribution)
    local_index = [nodes[:r].count(node) for r, node in enumerate(nodes)]
    if "SLURM_LOCALID" in environ and _integer(environ, "SLURM_LOCALID") != local_index[rank]:
        raise ConfigError(
            f"SLURM_LOCALID={environ['SLURM_LOCALID']}, but {distribution} distribution puts rank {rank} "
            f"at local index {local_index[rank]} on {hosts[nodes[rank]]}; is SLURM_DISTRIBUTION right?"
        )
    addresses = [f"{hosts[node]}:{port_base + local}" for node, local in zip_strict(nodes, local_index)]
    if groups == "by_host":
        node_names = [hosts[node] for node in nodes]
        cluster = cluster_lib.assign_jobs_by_host(addresses, node_names, num_ps, "the Slurm step")
    else:
        cluster = cluster_lib.assign_jobs(addresses, num_ps, num_groups, "the Slurm step")
    job_name, task_index = cluster.task_at(addresses[rank])
    return Placement(cluster, job_name, task_index)


def narrowed_gpus(environ, job_name):
    """The CUDA_VISIBLE_DEVICES this task should see, or None to leave it alone.

    A parameter server sees none. A worker keeps one GPU of the list Slurm allocated, picked by its
    SLURM_LOCALID, so the tasks of a node use different GPUs; a node without GPUs is left alone.
    """
    if job_name in cluster_lib.SERVER_JOBS:
        return ""
    allocated = [gpu for gpu in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if gpu.strip()]
    if len(allocated) < 2:
        return None
    return allocated[_integer(environ, "SLURM_LOCALID") % len(allocated)]


def _distribution(environ):
    """The node-level part of SLURM_DISTRIBUTION ('cyclic:block,Pack' -> 'cyclic'); block if unset."""
    value = environ.get("SLURM_DISTRIBUTION", "block")
    kind = re.split(r"[:,]", value)[0]
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"SLURM_DISTRIBUTION={value}: only {' and '.join(DISTRIBUTIONS)} distribution are supported")
    return kind


def _first_name(environ, *names):
    for name in names:
        if environ.get(name):
            return name
    raise ConfigError(f"--cluster_resolver=slurm: {names[0]} is not set; run the task under srun")


def _first_of(environ, *names):
    return environ[_first_name(environ, *names)]


def _integer(environ, name):
    value = environ.get(name)
    if value is None or not value.strip().isdigit():
        raise ConfigError(f"{name}={value!r}: expected a number (is this task running under srun?)")
    return int(value)
