import os

import pytest

from parallel_tf.cluster import config as cluster
from parallel_tf.compat import tf
from parallel_tf.graph import placement
from parallel_tf.launch import processes
from parallel_tf.launch.local import gpu_environments
from parallel_tf.training import devices


@pytest.mark.parametrize(
    "num_gpus, expected",
    [
        (0, ["CPU:0", "CPU:0", "CPU:0", "CPU:0", "CPU:0"]),
        (1, ["GPU:0", "GPU:0", "GPU:0", "GPU:0", "GPU:0"]),
        (2, ["GPU:0", "GPU:1", "GPU:0", "GPU:1", "GPU:0"]),
        (4, ["GPU:0", "GPU:1", "GPU:2", "GPU:3", "GPU:0"]),
    ],
)
def test_worker_i_is_pinned_to_gpu_i_mod_g(num_gpus, expected):
    assert [placement.worker_device(i, num_gpus) for i in range(5)] == [
        f"/job:worker/task:{i}/device:{device}" for i, device in enumerate(expected)
    ]


def test_launcher_gives_each_worker_one_gpu_and_ps_none():
    config = cluster.from_hosts(["a:1", "a:2"], ["a:3", "a:4", "a:5"])
    assert gpu_environments(config, gpus=[]) == {}
    assert gpu_environments(config, gpus=["0", "1"]) == {
        "ps:0": "",
        "ps:1": "",
        "worker:0": "0",
        "worker:1": "1",
        "worker:2": "0",
    }
    assert gpu_environments(config, gpus=["3"])["worker:2"] == "3"


def test_tasks_given_gpus_are_each_a_process_of_their_own_not_forked(capsys):
    """A forked task would inherit the fork server's CUDA_VISIBLE_DEVICES (launch/forkserver.py): with GPUs, the
    launcher starts each task as a process of its own, and says so."""
    tasks = [("worker:0", ["python", "-u", "recipe.py"])]
    assert processes.Cluster(tasks, {}, pins=(None, None)).pins == (None, None)
    assert processes.Cluster(tasks, {"worker:0": "0"}, pins=(None, None)).pins is None
    assert "each task is a process of its own, not forked: with GPUs, each must see" in capsys.readouterr().out


def test_variables_go_to_ps_cpus_balanced_by_size_and_compute_to_the_worker():
    config = cluster.from_hosts(["a:1", "a:2"], ["a:3", "a:4"])
    with tf.Graph().as_default(), tf.device(placement.device_setter(config, task_index=1, num_gpus=2)):
        big = tf.get_variable("big", [1000, 100])
        small = [tf.get_variable(f"small{i}", [10]) for i in range(3)]
        product = tf.matmul(big, tf.ones([100, 1]))
    assert big.device == "/job:ps/task:0/device:CPU:0"
    # the big variable fills ps 0, so the small ones all balance onto ps 1
    assert {v.device for v in small} == {"/job:ps/task:1/device:CPU:0"}
    assert product.device == "/job:worker/task:1/device:GPU:1"


def test_gpu_workers_ask_for_deterministic_kernels_unless_the_user_chose(monkeypatch):
    monkeypatch.setenv(devices.DETERMINISTIC_OPS, "")  # so that its absence, or the user's value, comes back after
    monkeypatch.delenv(devices.DETERMINISTIC_OPS)
    assert devices.use_deterministic_gpu_kernels() == "1" == os.environ[devices.DETERMINISTIC_OPS]
    monkeypatch.setenv(devices.DETERMINISTIC_OPS, "0")  # a user comparing against non-deterministic kernels
    assert devices.use_deterministic_gpu_kernels() == "0"
