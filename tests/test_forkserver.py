"""A forked task is stopped as a Popen'd one is, though its server, not the launcher, reaps it: through a pidfd,
which no later process given its number can receive, or by its number where the kernel has no pidfds."""

import errno
import os
import signal
import subprocess

import pytest

from parallel_tf.launch import forkserver
from parallel_tf.launch.forkserver import ForkedTask


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_forked_task_is_stopped_as_a_popen_one_is_until_its_exit_is_reported(sleeper):
    task = ForkedTask("worker:0", sleeper.pid, stdout=None)
    task.terminate()
    assert sleeper.wait(10) == -signal.SIGTERM
    task.exited(-signal.SIGTERM)  # as the server reports it: the pidfd is closed, a later stop does nothing
    task.kill()
    assert (task.poll(), task.wait(0)) == (-signal.SIGTERM, -signal.SIGTERM)


def test_a_forked_task_is_stopped_by_its_number_on_a_kernel_without_pidfds(sleeper, monkeypatch):
    def no_pidfds(pid):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(forkserver, "pidfd_open", no_pidfds)  # the backport it calls: os's has none before 3.9
    ForkedTask("worker:0", sleeper.pid, stdout=None).kill()
    assert sleeper.wait(10) == -signal.SIGKILL
