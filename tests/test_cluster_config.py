import json
import re
from pathlib import Path

import pytest

from parallel_tf.cluster import config as cluster
from parallel_tf.errors import ConfigError
from parallel_tf.launch import hosts
from parallel_tf.launch.launcher import resume_hint
from parallel_tf.launch.local import local_cluster
from parallel_tf.launch.restarts import cluster_for_restart
from parallel_tf.training import modes

GOOD = {"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "localhost:2224"]}}


def test_spec_file_gives_jobs_in_order(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(GOOD))
    config = cluster.from_spec_file(str(path))
    assert (config.num_ps, config.num_workers) == (1, 2)
    assert config.jobs["worker"] == ("127.0.0.1:2223", "localhost:2224")
    assert json.loads(config.to_json()) == GOOD


def test_host_flags_and_tf_config_give_the_same_cluster():
    from_flags = cluster.from_hosts(["127.0.0.1:2222"], ["127.0.0.1:2223", "localhost:2224"])
    tf_config = json.dumps(dict(GOOD, task={"type": "worker", "index": 1}))
    from_env, job, index = cluster.from_tf_config(tf_config)
    assert from_flags == from_env
    assert (job, index) == ("worker", 1)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"ps": []}, 'expected an object with a "cluster" object'),
        ({"cluster": {"ps": [], "worker": ["a:1"]}}, "cluster.ps: missing or empty"),
        ({"cluster": {"ps": ["a:1"]}}, "cluster.worker: missing or empty"),
        ({"cluster": {"ps": ["a:1"], "worker": []}}, "cluster.worker: missing or empty"),
        ({"cluster": {"ps": "a:1", "worker": ["b:2"]}}, "cluster.ps: expected a list"),
        ({"cluster": {"ps": ["a:1"], "worker": ["127.0.0.1"]}}, "cluster.worker[0]: '127.0.0.1' is not host:port"),
        ({"cluster": {"ps": [":1"], "worker": ["b:2"]}}, "cluster.ps[0]: ':1' has no host"),
        ({"cluster": {"ps": ["a:1"], "worker": ["b:70000"]}}, "cluster.worker[0]: 'b:70000': port must be"),
        ({"cluster": {"ps": ["a:0"], "worker": ["b:2"]}}, "port must be a number from 1 to 65535"),
        ({"cluster": {"ps": ["a:x"], "worker": ["b:2"]}}, "port must be a number"),
        (
            {"cluster": {"ps": ["a:1"], "worker": ["b:2", "a:1"]}},
            "cluster.worker[1]: address a:1 is already used by cluster.ps[0]",
        ),
        ({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "chief": ["c:3"]}}, "cluster.chief: unknown job"),
    ],
)
def test_bad_specs_name_the_field(data, message):
    with pytest.raises(ConfigError, match="^spec.json: ") as error:
        cluster.parse(data, "spec.json")
    assert message in str(error.value)


def test_malformed_json_names_file_and_position(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text('{"cluster": {"ps": ["a:1"],}}')
    with pytest.raises(ConfigError, match=r"spec.json: malformed JSON at line 1 column 28"):
        cluster.from_spec_file(str(path))


def test_missing_spec_file():
    with pytest.raises(ConfigError, match="--cluster_spec=/nonexistent.json: cannot read"):
        cluster.from_spec_file("/nonexistent.json")


def test_task_must_exist_in_the_cluster():
    config = cluster.parse(GOOD, "spec")
    config.check_task("worker", 1)
    with pytest.raises(
        ConfigError, match=r"--task_index=2 is out of range: job 'worker' has 2 task\(s\), indices 0..1"
    ):
        config.check_task("worker", 2)
    with pytest.raises(ConfigError, match="--job_name='chief' is not a job of the cluster"):
        config.check_task("chief", 0)


def test_resolve_takes_exactly_one_source(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(GOOD))
    with pytest.raises(ConfigError, match="not both --cluster_spec and --ps_hosts/--worker_hosts"):
        cluster.from_given_source(str(path), ["a:1"], [], environ={})
    assert cluster.from_given_source(None, [], [], environ={}) == (None, None, None)
    config, job, index = cluster.from_given_source(None, [], [], environ={"TF_CONFIG": json.dumps(GOOD)})
    assert config.num_workers == 2 and (job, index) == (None, None)


HIERARCHICAL = {
    "cluster": {"ps": ["a:1"], "local_ps": ["a:2", "a:3"], "worker": ["a:4", "a:5", "a:6", "a:7"]},
    "groups": [[0, 2], [1, 3]],
}


def test_hierarchical_spec_gives_groups_and_each_workers_servers():
    config = cluster.parse(HIERARCHICAL, "spec")
    assert list(config.jobs) == ["ps", "local_ps", "worker"]  # the order tasks are started in
    assert config.groups == ((0, 2), (1, 3))
    assert [config.group_of(w) for w in range(4)] == [0, 1, 0, 1]
    assert config.servers_of(3) == [("ps", 0), ("local_ps", 1)]
    assert (config.workers_served_by("ps", 0), config.workers_served_by("local_ps", 1)) == ([0, 1, 2, 3], [1, 3])
    assert json.loads(config.to_json()) == HIERARCHICAL


@pytest.mark.parametrize(
    "groups, message",
    [
        ([[0, 2], [1, 2, 3]], "groups[1]: worker 2 is already in groups[0]"),
        ([[0, 2], [1]], "groups: worker(s) 3 in no group"),
        ([[0, 1, 2, 3]], "groups: 1 group(s) but 2 local_ps task(s)"),
        ([[0, 2], [1, 4]], "groups[1]: 4 is not a worker index 0..3"),
        ([[0, 2], []], "groups: expected a list of non-empty lists of worker indices"),
        ([[0, "2"], [1, 3]], "groups[0]: '2' is not a worker index"),
    ],
)
def test_bad_groups_are_named(groups, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        cluster.parse(dict(HIERARCHICAL, groups=groups), "spec")


def test_local_ps_and_groups_come_together_and_only_in_hierarchical_mode():
    without_groups = {"cluster": HIERARCHICAL["cluster"]}
    with pytest.raises(ConfigError, match='cluster.local_ps needs "groups"'):
        cluster.parse(without_groups, "spec")
    without_local_ps = dict(GOOD, groups=[[0], [1]])
    with pytest.raises(ConfigError, match='a grouped cluster needs a "local_ps" job'):
        cluster.parse(without_local_ps, "spec")
    with pytest.raises(ConfigError, match="--mode=hierarchical needs a cluster spec with"):
        modes.check_cluster("hierarchical", cluster.parse(GOOD, "spec"))
    with pytest.raises(ConfigError, match="which only --mode=hierarchical uses, not async"):
        modes.check_cluster("async", cluster.parse(HIERARCHICAL, "spec"))


def test_an_allreduce_cluster_has_workers_only_and_the_other_modes_a_ps():
    workers_only = {"cluster": {"worker": ["127.0.0.1:2223", "localhost:2224"]}}
    config = cluster.parse(workers_only, "spec")
    modes.check_cluster("allreduce", config)
    assert (config.num_ps, config.servers_of(0), config.peers_of(1)) == (0, [], [("worker", 0)])
    assert cluster.from_hosts([], ["127.0.0.1:2223", "localhost:2224"]) == config
    assert cluster.from_tf_config(json.dumps({**workers_only, "task": {"type": "worker", "index": 1}}))[0] == config
    with pytest.raises(ConfigError, match='--mode=sync needs a parameter server: the cluster has no "ps" job'):
        modes.check_cluster("sync", config)
    with pytest.raises(ConfigError, match="--mode=allreduce runs workers only.* would sit idle: leave it out"):
        modes.check_cluster("allreduce", cluster.parse(GOOD, "spec"))
    generated = local_cluster("allreduce", num_ps=1, num_workers=3, num_groups=2)
    assert (generated.num_ps, generated.num_workers, generated.groups) == (0, 3, ())
    assert hosts.layout("allreduce", 1, 4, 2, 2).as_dict() == {
        "worker": ["10.77.0.1:2222", "10.77.0.2:2222", "10.77.0.1:2223", "10.77.0.2:2223"]
    }


def test_launcher_interleaves_groups_as_in_the_seed():
    config = local_cluster("hierarchical", num_ps=1, num_workers=5, num_groups=2)
    assert config.groups == ((0, 2, 4), (1, 3))
    assert (config.num_ps, len(config.jobs["local_ps"]), config.num_workers) == (1, 2, 5)
    assert not local_cluster("async", num_ps=2, num_workers=3, num_groups=2).groups
    with pytest.raises(ConfigError, match="--num_groups=3 is more than --num_workers=2"):
        local_cluster("hierarchical", num_ps=1, num_workers=2, num_groups=3)


@pytest.mark.parametrize("name", ["local_1ps_2w", "local_1ps_4w", "local_2ps_4w", "hierarchical_2x2", "local_2w"])
def test_shipped_specs_are_valid_for_their_mode(name):
    config = cluster.from_spec_file(str(Path(__file__).resolve().parents[1] / "cluster_specs" / f"{name}.json"))
    modes.check_cluster({"hierarchical_2x2": "hierarchical", "local_2w": "allreduce"}.get(name, "sync"), config)
    assert all(address.startswith("127.0.0.1:") for hosts in config.jobs.values() for address in hosts)


def test_restart_without_min_workers_brings_back_every_task():
    cluster = local_cluster("sync", 1, 4, 2)
    assert cluster_for_restart(cluster, "worker:1", None, lambda c: True) == cluster


def test_restart_with_min_workers_leaves_the_failed_worker_out_and_keeps_a_count_that_fits():
    cluster = local_cluster("sync", 1, 4, 2)
    even = lambda c: c.num_workers % 2 == 0  # noqa: E731 -- like --microbatches=8 under strict determinism
    restarted = cluster_for_restart(cluster, "worker:1", 2, even)
    workers = cluster.jobs["worker"]
    assert restarted.jobs == {"ps": cluster.jobs["ps"], "worker": (workers[0], workers[2])}  # 3 left; 2 fit
    assert cluster_for_restart(cluster, "worker:1", 3, even) == cluster  # 3 do not fit, 2 are too few
    assert cluster_for_restart(cluster, "ps:0", 2, even) == cluster  # a ps cannot be left out


def test_simulated_hosts_place_tasks_cyclically_on_the_same_port_numbers():
    """Two hosts, hierarchical by host: group g (its local ps and workers) on host g; ports from 2222 on each."""
    cluster = hosts.layout("hierarchical", 1, 4, 2, 2)
    assert cluster.as_dict() == {
        "ps": ["10.77.0.1:2222"],
        "local_ps": ["10.77.0.1:2223", "10.77.0.2:2222"],
        "worker": ["10.77.0.1:2224", "10.77.0.2:2223", "10.77.0.1:2225", "10.77.0.2:2224"],
    }
    assert cluster.groups == ((0, 2), (1, 3))
    for g, members in enumerate(cluster.groups):  # every group on one host, with its local ps
        on = {hosts.host_of(cluster.jobs["worker"][w]) for w in members} | {hosts.host_of(cluster.jobs["local_ps"][g])}
        assert on == {g}


@pytest.mark.parametrize(
    "rate, bucket, segment",
    [
        ("1gbit", 25000, 12500),  # 1e9 bit/s x 200 µs / 8 = 25,000 bytes; half of it
        ("100mbit", 3000, 1500),  # 2,500 is under the floor of two packets, 3,000
        ("10gbit", 250000, 65536),  # half would be 125,000: more than TCP ever hands a device
    ],
)
def test_a_link_hands_its_devices_segments_that_fit_its_bucket(rate, bucket, segment):
    """A segment larger than the bucket is cut into packets by tbf, a timer's wake each (at 1gbit the stream fell to
    764-803 Mbit/s): a shaped device gets segments of half its bucket, so that one with its headers fits whole."""
    link = hosts.Link(rate)
    assert (link.burst_bytes, link.segment_bytes) == (bucket, segment)


def test_the_resume_hint_names_a_default_logdir_which_the_same_command_would_not_find():
    assert resume_hint("runs/mnist-sync-20261124-020802", logdir_given=False) == (
        "to resume from the latest checkpoint in runs/mnist-sync-20261124-020802, run the same command "
        "with --logdir=runs/mnist-sync-20261124-020802"
    )
    assert resume_hint("runs/exp1", logdir_given=True).endswith("in runs/exp1, run the same command")
    assert resume_hint("runs/exp1", logdir_given=True, checkpointed=False) == (
        "nothing was checkpointed in runs/exp1: run the same command to start again"
    )
