"""Helpers for tests that start real processes: every one is tracked by PID and killed on
teardown, pass or fail. Ports are free 127.0.0.1 ports picked by the test."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "mnist.py")
CIFAR_RECIPE = str(REPO / "recipes" / "cifar10.py")
PID_LINE = re.compile(r"started (\S+) \(pid (\d+)\)")


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def read_summary(logdir):
    return json.loads((Path(logdir) / "summary.json").read_text())


# Set once, on purpose, by the first import of parallel_tf.compat (quiet logs, the same CPU kernels).
ENVIRONMENT_SET_BY_COMPAT = {"TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"}
ENVIRONMENT_SET_BY_PYTEST = {"PYTEST_CURRENT_TEST"}


@pytest.fixture(autouse=True)
def environment_unchanged():
    """Fails a test that leaves os.environ changed: every process started later inherits it (srun
    passes it to Slurm's tasks too), and a leaked TF_DETERMINISTIC_OPS=1 changes CPU results."""
    before = dict(os.environ)
    yield
    changed = {k for k in before.keys() | os.environ.keys() if before.get(k) != os.environ.get(k)}
    assert not changed - ENVIRONMENT_SET_BY_COMPAT - ENVIRONMENT_SET_BY_PYTEST, f"the test left these environment variables changed: {changed}"


class Running:
    """A started process whose merged output is collected line by line as it comes."""

    def __init__(self, command, tracker, env=None):
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
        tracker.pids.append(self.proc.pid)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            match = PID_LINE.search(line)
            if match:
                self.task_pids[match.group(1)] = int(match.group(2))
                self.tracker.pids.append(int(match.group(2)))

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
        self.pids = []

    def start(self, command, env=None):
        return Running(command, self, env)

    def kill_all(self):
        for pid in self.pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def procs():
    tracker = ProcessTracker()
    yield tracker
    tracker.kill_all()


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
    return [sys.executable, "-m", "parallel_tf.peer_strategies", *args]
