"""Helpers for tests that start real processes: every one is tracked by PID and killed on
teardown, pass or fail. Ports are free 127.0.0.1 ports picked by the test."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from parallel_tf.launch import warm_client
from parallel_tf.launch.local import free_loopback_addresses

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "mnist.py")
CIFAR_RECIPE = str(REPO / "recipes" / "cifar10.py")
PID_LINE = re.compile(r"started (\S+) \(pid (\d+)\)")
FORK_SERVER_LINE = re.compile(r"in a fork server \(pid (\d+)\)")
SLURM_LOCAL = REPO / "scripts" / "slurm_local.sh"
SYNC_STEPS = ["--train_steps=100", "--log_every=20"]
RUN_TIMEOUT = 240

# Tests send SIGINT to the processes they start (Ctrl-C to the launcher, the bench, a study), which must get it. A
# shell without job control starts a background job (`./run_tests.sh &` in a CI script) with SIGINT ignored, which
# every child would inherit across exec; a handler here is the default again in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


SHOW_DISTRIBUTION = "PARALLEL_TF_SHOW_DISTRIBUTION"  # tests/test_documented_commands.py: how a command distributes


def pytest_configure(config):
    """With SHOW_DISTRIBUTION set, says how the command would distribute its tests, and runs none."""
    if os.environ.get(SHOW_DISTRIBUTION):
        workers = config.getoption("numprocesses", None)
        print(f"distribution: {config.getoption('dist', 'no')} over {workers or 0} workers", flush=True)
        pytest.exit("distribution shown", returncode=0)


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def start_time(pid):
    """When process `pid` started (clock ticks since boot), None once it is gone: with the number, what tells it
    from a later process, or a thread of this one, given the same number after it exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        return None


def read_summary(logdir):
    return json.loads((Path(logdir) / "summary.json").read_text())


@pytest.fixture(scope="session", autouse=True)
def tensorflow_imported():
    """TensorFlow's import sets variables of its own (TF2_BEHAVIOR, ...), as does compat around it:
    done once, before the first test's snapshot of the environment, whichever test runs first."""
    from parallel_tf.compat import tf

    tf.get_default_graph()


@pytest.fixture(scope="session")
def warm_server(tensorflow_imported):
    """A warm fork server (launch/warm_server.py) for the session, started from this process's environment as the
    launches of the tests inherit it: the path of its socket."""
    with warm_client.running() as path:
        yield path


@pytest.fixture
def from_the_warm_server(warm_server, monkeypatch):
    """The test's launches fork their tasks from the session's warm server (its socket's path): one TensorFlow load
    for them all."""
    monkeypatch.setenv(warm_client.SOCKET_VARIABLE, warm_server)
    return warm_server


# Set once, on purpose, by a first import: parallel_tf.compat's (quiet logs, the same CPU kernels),
# scikit-learn's (its OpenMP settings); and by pytest itself.
ENVIRONMENT_SET_BY_IMPORTS = {
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL",
    "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK",
    "PARALLEL_TF_SET",
}
ENVIRONMENT_SET_BY_PYTEST = {"PYTEST_CURRENT_TEST"}


@pytest.fixture(autouse=True)
def environment_unchanged():
    """Fails a test that leaves os.environ changed: every process started later inherits it (srun
    passes it to Slurm's tasks too), and a leaked TF_DETERMINISTIC_OPS=1 changes CPU results."""
    before = dict(os.environ)
    yield
    changed = {k for k in before.keys() | os.environ.keys() if before.get(k) != os.environ.get(k)}
    assert not changed - ENVIRONMENT_SET_BY_IMPORTS - ENVIRONMENT_SET_BY_PYTEST, (
        f"the test left these environment variables changed: {changed}"
    )


class Running:
    """A started process whose merged output is collected line by line as it comes."""

    def __init__(self, command, tracker, env=None):
        self.env = env  # the variables it was given beyond this process's: a restart gives them again
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
        self.tracker = tracker
        self.lines = []
        self.task_pids = {}
        self.fork_server_pids = []  # the launcher's, one a start of the cluster
        tracker.track(self.proc.pid)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            match = PID_LINE.search(line)
            if match:
                self.task_pids[match.group(1)] = int(match.group(2))
                self.tracker.track(int(match.group(2)))
            server = FORK_SERVER_LINE.search(line)
            if server:
                self.fork_server_pids.append(int(server.group(1)))
                self.tracker.track(int(server.group(1)))

    @property
    def output(self):
        return "\n".join(self.lines)

    def wait(self, timeout):
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.proc.args[:4]}... still running after {timeout}s; output:\n{self.output}")
        self._reader.join(timeout=5)
        return code

    def wait_for_line(self, pattern, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        pytest.fail(f"no line matching {pattern!r} within {timeout}s; output:\n{self.output}")


class ProcessTracker:
    def __init__(self):
        self.started = {}  # pid: its start time

    def start(self, command, env=None):
        return Running(command, self, env)

    def track(self, pid):
        self.started.setdefault(pid, start_time(pid))

    def kill_all(self):
        """SIGKILL to each process tracked that still runs, by PID: the same process, never a later one given its
        number (a thread of this process can be: a session-scoped run's tasks are killed at the session's end)."""
        for pid, started in self.started.items():
            if started is not None and alive(pid) and start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def procs():
    tracker = ProcessTracker()
    yield tracker
    tracker.kill_all()


@pytest.fixture(scope="module")
def procs_module():
    """procs, for a module whose tests share the processes a module-scoped fixture starts."""
    tracker = ProcessTracker()
    yield tracker
    tracker.kill_all()


@pytest.fixture(scope="session")
def sync_two_workers(tmp_path_factory):
    """The launcher's sync run of ps:0, worker:0, worker:1 that every other way of starting that
    cluster (tasks by hand, srun on a real Slurm) must match bitwise. On consecutive ports, as a
    Slurm step on one node places them (--port_base + local index), and in this network namespace,
    so tasks started by hand can restart on its ports right after it."""
    logdir = tmp_path_factory.mktemp("launch") / "two_workers"
    base = consecutive_free_ports(3)
    spec = logdir.parent / "consecutive.json"
    addresses = [f"127.0.0.1:{base + offset}" for offset in range(3)]
    spec.write_text(json.dumps({"cluster": {"ps": addresses[:1], "worker": addresses[1:]}}))
    tracker = ProcessTracker()
    command = launcher_command(f"--logdir={logdir}", *SYNC_STEPS, f"--cluster_spec={spec}", "--isolate_network=off")
    run = tracker.start(command)
    try:
        assert run.wait(RUN_TIMEOUT) == 0, run.output
        yield run, logdir
    finally:
        tracker.kill_all()


def consecutive_free_ports(count):
    """The first of `count` consecutive free 127.0.0.1 ports."""
    for _ in range(100):
        base = int(free_loopback_addresses(1)[0].split(":")[1])
        sockets = [socket.socket() for _ in range(count)]
        try:
            for offset, s in enumerate(sockets):
                s.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    pytest.fail(f"found no {count} consecutive free ports")


def slurm_is_up():
    """True when scripts/slurm_local.sh has a Slurm running that answers."""
    try:
        return subprocess.run(slurm_command("sinfo"), capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def slurm_command(*args):
    """`args` run on the local Slurm's login node (scripts/slurm_local.sh run)."""
    return [str(SLURM_LOCAL), "run", *args]


def launcher_command(*args):
    return [sys.executable, "-m", "parallel_tf.launch", *args]


def k8s_command(*args):
    return [sys.executable, "-m", "parallel_tf.k8s", *args]


def recipe_command(*args):
    return [sys.executable, RECIPE, *args]


def cifar_command(*args):
    return [sys.executable, CIFAR_RECIPE, *args]


def study_command(*args):
    return [sys.executable, "-m", "parallel_tf.study", *args]


def bench_command(*args):
    return [sys.executable, "-m", "parallel_tf.bench", *args]


def peers_command(*args):
    return [sys.executable, "-m", "parallel_tf.tools.tf_strategies", *args]
