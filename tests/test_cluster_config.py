import json

import pytest

from parallel_tf import cluster
from parallel_tf.errors import ConfigError

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
        ({"cluster": {"worker": ["a:1"]}}, "cluster.ps: missing or empty"),
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
        cluster.resolve(str(path), ["a:1"], [], environ={})
    assert cluster.resolve(None, [], [], environ={}) == (None, None, None)
    config, job, index = cluster.resolve(None, [], [], environ={"TF_CONFIG": json.dumps(GOOD)})
    assert config.num_workers == 2 and (job, index) == (None, None)
