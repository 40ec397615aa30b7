"""Cluster configuration: turns a spec file, host flags or TF_CONFIG into validated facts.

All three sources go through `parse`, so every one of them is checked the same way and every
error names the source and the field that is wrong.
"""

import dataclasses
import json
import os

from parallel_tf.errors import ConfigError

JOBS = ("ps", "worker")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """Addresses of every task, by job. Worker 0 is the chief."""

    jobs: dict

    @property
    def num_ps(self):
        return len(self.jobs["ps"])

    @property
    def num_workers(self):
        return len(self.jobs["worker"])

    def as_dict(self):
        """The `cluster` mapping that `tf.train.ClusterSpec` and TF_CONFIG take."""
        return {job: list(hosts) for job, hosts in self.jobs.items()}

    def to_json(self):
        return json.dumps({"cluster": self.as_dict()}, indent=2) + "\n"

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


def parse(data, source):
    """Validates a spec mapping ({"cluster": {...}}) read from `source` (a name for messages)."""
    if not isinstance(data, dict) or not isinstance(data.get("cluster"), dict):
        raise ConfigError(f'{source}: expected an object with a "cluster" object, e.g. {{"cluster": {{"ps": [...]}}}}')
    cluster = data["cluster"]
    for job in cluster:
        if job not in JOBS:
            raise ConfigError(f"{source}: cluster.{job}: unknown job (known jobs: {', '.join(JOBS)})")
    jobs = {}
    seen = {}
    for job in JOBS:
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
    return ClusterConfig(jobs)


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
    return parse({"cluster": {"ps": list(ps_hosts), "worker": list(worker_hosts)}}, "--ps_hosts/--worker_hosts")


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


def resolve(cluster_spec, ps_hosts, worker_hosts, environ=os.environ):
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
