"""Cluster configuration: turns a spec file, host flags or TF_CONFIG into validated facts.

All three sources go through `parse`, so every one of them is checked the same way and every
error names the source and the field that is wrong.
"""

import dataclasses
import json
import os

from parallel_tf.errors import ConfigError

KNOWN_JOBS = ("ps", "local_ps", "worker")  # in start order; hierarchical clusters add a local ps per group
SERVER_JOBS = ("ps", "local_ps")  # jobs that host variables and wait for their workers to finish


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """Addresses of every task, by job. Worker 0 is the chief.

    In a hierarchical cluster, `groups[g]` lists the workers of group g, whose local parameter
    server is local_ps task g and whose chief is its first worker.
    """

    jobs: dict
    groups: tuple = ()

    @property
    def num_ps(self):
        return len(self.jobs.get("ps", ()))

    @property
    def num_workers(self):
        return len(self.jobs["worker"])

    def as_dict(self):
        """The `cluster` mapping that `tf.train.ClusterSpec` and TF_CONFIG take."""
        return {job: list(hosts) for job, hosts in self.jobs.items()}

    def to_json(self):
        data = {"cluster": self.as_dict()}
        if self.groups:
            data["groups"] = [list(group) for group in self.groups]
        return json.dumps(data, indent=2) + "\n"

    def group_of(self, worker):
        """The index of the group `worker` belongs to (hierarchical clusters only)."""
        return next(g for g, members in enumerate(self.groups) if worker in members)

    def servers_of(self, worker):
        """(job, task) of every server `worker` uses: all central ps tasks, and its group's local ps."""
        servers = [("ps", k) for k in range(self.num_ps)]
        if self.groups:
            servers.append(("local_ps", self.group_of(worker)))
        return servers

    def workers_served_by(self, job, task):
        """The indices of the workers that use server (job, task): those it waits for before exiting."""
        return sorted(self.groups[task]) if job == "local_ps" else list(range(self.num_workers))

    def tasks(self):
        """(name, address) of every task, in start order: "ps:0", "local_ps:0", ..., "worker:0", ..."""
        return [(f"{job}:{i}", address) for job, hosts in self.jobs.items() for i, address in enumerate(hosts)]

    def task_at(self, address):
        """(job, index) of the task listening at `address`."""
        return next((job, hosts.index(address)) for job, hosts in self.jobs.items() if address in hosts)

    def peers_of(self, worker):
        """The tasks `worker` must reach before it starts: the servers it uses, or in a cluster of workers
        only (all-reduce), every other worker."""
        if self.num_ps:
            return self.servers_of(worker)
        return [("worker", w) for w in range(self.num_workers) if w != worker]

    def check_task(self, job_name, task_index):
        """Raises ConfigError unless (job_name, task_index) names a task of this cluster."""
        if job_name not in self.jobs:
            raise ConfigError(f"--job_name={job_name!r} is not a job of the cluster (jobs: {', '.join(self.jobs)})")
        count = len(self.jobs[job_name])
        if not 0 <= task_index < count:
            raise ConfigError(
                f"--task_index={task_index} is out of range: job {job_name!r} has {count} task(s), "
                f"indices 0..{count - 1}"
            )


def check_shardable(global_batch_size, num_shards):
    if global_batch_size % num_shards:
        raise ConfigError(
            f"--global_batch_size={global_batch_size} is not divisible by the worker count {num_shards}; "
            "every worker must get an equal slice"
        )


def assign_jobs(addresses, num_ps, num_groups, source):
    """A cluster from addresses in start order: `num_ps` central ps tasks first, then one local ps for
    each of `num_groups` groups, then the workers, worker i in group i mod G as in the seed. The counts
    are the mode's (training.modes.server_counts): no ps in all-reduce, groups only in hierarchical."""
    num_workers = len(addresses) - num_ps - num_groups
    if num_workers < 1:
        raise ConfigError(
            f"{source} has {len(addresses)} task(s): too few for {num_ps} ps"
            + (f", {num_groups} local ps" if num_groups else "")
            + " and at least one worker"
        )
    if num_groups > num_workers:
        raise ConfigError(f"--num_groups={num_groups} is more than the {num_workers} worker(s) of {source}")
    addresses = iter(addresses)
    sizes = {"ps": num_ps, "local_ps": num_groups, "worker": num_workers}
    spec: dict = {"cluster": {job: [next(addresses) for _ in range(size)] for job, size in sizes.items() if size}}
    if num_groups:
        spec["groups"] = [list(range(g, num_workers, num_groups)) for g in range(num_groups)]
    return parse(spec, source)


def assign_jobs_by_host(addresses, hosts, num_ps, source):
    """A hierarchical cluster with one group per host, from addresses in start order and the host of
    each: the first `num_ps` are the central ps; on every host the first task left is the group's
    local ps and the rest are its workers (numbered in start order across hosts)."""
    central, rest = list(range(num_ps)), range(num_ps, len(addresses))
    by_host: dict = {}
    for task in rest:
        by_host.setdefault(hosts[task], []).append(task)
    if not by_host or any(len(tasks) < 2 for tasks in by_host.values()):
        empty = next((host for host, tasks in by_host.items() if len(tasks) < 2), "every host")
        raise ConfigError(f"{source}: with one group per host, {empty} needs a local ps and at least one worker")
    local_ps = [tasks[0] for tasks in by_host.values()]
    workers = sorted(task for tasks in by_host.values() for task in tasks[1:])
    groups = [[workers.index(task) for task in tasks[1:]] for tasks in by_host.values()]
    cluster = {
        "ps": [addresses[t] for t in central],
        "local_ps": [addresses[t] for t in local_ps],
        "worker": [addresses[t] for t in workers],
    }
    return parse({"cluster": cluster, "groups": groups}, source)


def parse(data, source):
    """Validates a spec mapping ({"cluster": {...}}, optionally "groups") read from `source` (a name for messages)."""
    if not isinstance(data, dict) or not isinstance(data.get("cluster"), dict):
        raise ConfigError(f'{source}: expected an object with a "cluster" object, e.g. {{"cluster": {{"ps": [...]}}}}')
    cluster = data["cluster"]
    for job in cluster:
        if job not in KNOWN_JOBS:
            raise ConfigError(f"{source}: cluster.{job}: unknown job (known jobs: {', '.join(KNOWN_JOBS)})")
    jobs = {}
    seen: dict = {}
    for job in (j for j in KNOWN_JOBS if j == "worker" or j in cluster):
        hosts = cluster.get(job)
        if not hosts:
            raise ConfigError(f"{source}: cluster.{job}: missing or empty; a cluster needs at least one {job} task")
        if not isinstance(hosts, list):
            raise ConfigError(f"{source}: cluster.{job}: expected a list of host:port strings")
        for index, address in enumerate(hosts):
            field = f"cluster.{job}[{index}]"
            _check_address(address, f"{source}: {field}")
            if address in seen:
                raise ConfigError(f"{source}: {field}: address {address} is already used by {seen[address]}")
            seen[address] = field
        jobs[job] = tuple(hosts)
    groups = _parse_groups(data.get("groups"), jobs, source)
    return ClusterConfig(jobs, groups)


def _parse_groups(groups, jobs, source):
    """Checks that `groups` and local_ps come together, one local ps per group, each worker in one group."""
    num_local_ps = len(jobs.get("local_ps", ()))
    if groups is None:
        if num_local_ps:
            raise ConfigError(f'{source}: cluster.local_ps needs "groups": which workers each local ps serves')
        return ()
    if not num_local_ps:
        raise ConfigError(f'{source}: groups: a grouped cluster needs a "local_ps" job, one task per group')
    if not isinstance(groups, list) or not all(isinstance(group, list) and group for group in groups):
        raise ConfigError(
            f"{source}: groups: expected a list of non-empty lists of worker indices, e.g. [[0, 2], [1, 3]]"
        )
    if len(groups) != num_local_ps:
        raise ConfigError(
            f"{source}: groups: {len(groups)} group(s) but {num_local_ps} local_ps task(s); give one each"
        )
    num_workers = len(jobs["worker"])
    owner: dict = {}
    for g, group in enumerate(groups):
        for worker in group:
            if not isinstance(worker, int) or isinstance(worker, bool) or not 0 <= worker < num_workers:
                raise ConfigError(f"{source}: groups[{g}]: {worker!r} is not a worker index 0..{num_workers - 1}")
            if worker in owner:
                raise ConfigError(f"{source}: groups[{g}]: worker {worker} is already in groups[{owner[worker]}]")
            owner[worker] = g
    missing = [w for w in range(num_workers) if w not in owner]
    if missing:
        raise ConfigError(f"{source}: groups: worker(s) {', '.join(map(str, missing))} in no group")
    return tuple(tuple(group) for group in groups)


def _check_address(address, where):
    if not isinstance(address, str) or address.count(":") != 1:
        raise ConfigError(f"{where}: {address!r} is not host:port")
    host, port = address.split(":")
    if not host:
        raise ConfigError(f"{where}: {address!r} has no host")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{where}: {address!r}: port must be a number from 1 to 65535")


def from_spec_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"--cluster_spec={path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return parse(data, path)


def from_hosts(ps_hosts, worker_hosts):
    """A cluster from host lists; no --ps_hosts (all-reduce) is a cluster of workers only."""
    jobs = {"ps": list(ps_hosts)} if ps_hosts else {}
    return parse({"cluster": {**jobs, "worker": list(worker_hosts)}}, "--ps_hosts/--worker_hosts")


def from_tf_config(text):
    """Returns (ClusterConfig, job_name or None, task_index or None) from TF_CONFIG's JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG: malformed JSON at column {e.colno}: {e.msg}") from None
    config = parse(data, "TF_CONFIG")
    task = data.get("task") or {}
    if not isinstance(task, dict):
        raise ConfigError('TF_CONFIG: task: expected an object like {"type": "worker", "index": 0}')
    index = task.get("index")
    if index is not None and not isinstance(index, int):
        raise ConfigError(f"TF_CONFIG: task.index: expected an integer, got {index!r}")
    return config, task.get("type"), index


def from_tfjob_config(text, num_ps, num_groups):
    """(ClusterConfig, job, index) from the TF_CONFIG Kubeflow's TFJob operator injects, whose only
    server replica type is PS: its first `num_ps` tasks are the central ps, the next `num_groups`
    (hierarchical) the groups' local parameter servers, in start order as `assign_jobs` lays out."""
    config, job, index = from_tf_config(text)
    if job is None or index is None:
        raise ConfigError('TF_CONFIG: task: expected {"type": ..., "index": ...}, as the TFJob operator sets')
    config.check_task(job, index)
    addresses = [*config.jobs.get("ps", ()), *config.jobs["worker"]]
    cluster = assign_jobs(addresses, num_ps, num_groups, "TF_CONFIG")
    return (cluster, *cluster.task_at(config.jobs[job][index]))


def from_given_source(cluster_spec, ps_hosts, worker_hosts, environ=os.environ):
    """Picks the one cluster source the user gave; returns (config or None, job, index) from it.

    None means no cluster at all: the recipe trains in one plain process.
    """
    given = [
        name
        for name, value in (
            ("--cluster_spec", cluster_spec),
            ("--ps_hosts/--worker_hosts", ps_hosts or worker_hosts),
        )
        if value
    ]
    if len(given) > 1:
        raise ConfigError(f"give the cluster one way, not both {given[0]} and {given[1]}")
    if cluster_spec:
        return from_spec_file(cluster_spec), None, None
    if ps_hosts or worker_hosts:
        return from_hosts(ps_hosts or [], worker_hosts or []), None, None
    if environ.get("TF_CONFIG"):
        return from_tf_config(environ["TF_CONFIG"])
    return None, None, None
