"""What a task warns about, and which ports the launcher refuses, without starting TensorFlow."""

import errno
import socket
import subprocess
import sys

import pytest

from parallel_tf.cluster.addresses import check_port_free, exposure_warning, is_loopback
from parallel_tf.errors import ConfigError
from parallel_tf.launch.processes import Cluster


@pytest.mark.parametrize("address", ["127.0.0.1:2222", "localhost:2222", "127.8.0.1:1", "[::1]:2222"])
def test_loopback_addresses_need_no_warning(address):
    assert is_loopback(address) and exposure_warning(address) is None


@pytest.mark.parametrize("address", ["10.0.0.5:2222", "192.0.2.1:2222", "node7.example.com:2222", "0.0.0.0:2222"])
def test_other_addresses_warn_that_the_port_runs_unauthenticated_graphs(address):
    assert not is_loopback(address)
    assert "accepts unauthenticated graph execution" in exposure_warning(address, environ={})
    assert exposure_warning(address, environ={"PARALLEL_TF_PRIVATE_NETWORK": "1"}) is None  # the launcher's fence


@pytest.mark.parametrize(
    "reuse_address", [False, True], ids=["plain listener", "listener with SO_REUSEADDR, as gRPC's"]
)
def test_a_taken_port_is_a_config_error_naming_the_task(reuse_address):
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse_address))
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=f"worker:1's port {port} .* is already in use"):
            check_port_free(f"127.0.0.1:{port}", "worker:1")


def test_a_port_left_in_time_wait_by_a_finished_run_is_free():
    """A server that closes its connections first leaves them in TIME_WAIT on its port for a minute: a
    plain bind there fails, but gRPC's (SO_REUSEADDR, like its listener's) succeeds, so a task restarted
    on that port right away must start."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's server sets it
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    with socket.socket() as plain, pytest.raises(OSError) as refused:
        plain.bind(("0.0.0.0", port))
    assert refused.value.errno == errno.EADDRINUSE  # the connection is in TIME_WAIT, as after a run
    check_port_free(f"127.0.0.1:{port}", "worker:1")


def test_backup_workers_let_the_launcher_lose_only_spare_non_chief_workers():
    cluster = Cluster(tasks=[], cuda_devices={}, spare_workers=1)
    assert not cluster._can_lose("worker:0") and not cluster._can_lose("ps:0")
    assert cluster._can_lose("worker:2")
    cluster.lost.append("worker:2")
    assert not cluster._can_lose("worker:1")
    assert not Cluster(tasks=[], cuda_devices={})._can_lose("worker:1")


class _Exited:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


def test_of_tasks_failed_together_the_launcher_names_the_one_killed_by_a_signal():
    """A killed all-reduce worker's peer exits 1 within milliseconds, often in the same poll: the kill is
    the cause, whatever order the tasks were started in."""
    cluster = Cluster(tasks=[], cuda_devices={})
    cluster.procs = {"worker:0": _Exited(1), "worker:1": _Exited(-9), "worker:2": _Exited(None)}
    assert cluster._wait() == ("worker:1", -9)
    cluster.procs = {"worker:0": _Exited(1), "worker:1": _Exited(None)}
    assert cluster._wait() == ("worker:0", 1)


def test_the_launcher_stays_single_threaded_so_it_can_enter_a_private_network():
    """unshare(CLONE_NEWUSER) refuses a multi-threaded process (EINVAL), and numpy's BLAS starts a thread
    when it is imported: the launcher, and every module it imports, must not import numpy or TensorFlow."""
    probe = "import os, parallel_tf.launch.launcher; print(len(os.listdir('/proc/self/task')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "1"
