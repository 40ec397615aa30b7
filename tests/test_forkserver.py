"""A forked task is stopped as a Popen'd one is, though its server, not the launcher, reaps it: through a pidfd,
which no later process given its number can receive, or by its number where the kernel has no pidfds."""

import errno
import os
import signal
import subprocess
import sys

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


# A fork server loaded at 2 threads forks a task at 1 and one at 3: each sizes TensorFlow's intra-op pool by its own
# count as its first session starts, so the process of the second holds 2 threads more than the first's.
REPINNED = """
import os
from parallel_tf import compat
from parallel_tf.launch import forkserver
forkserver.load_tensorflow(2, "portable")
held = {}
for threads in (1, 3):
    read, write = os.pipe()
    if os.fork() == 0:
        compat.repin_threads(threads)
        compat.pin_before_loading(threads, "portable")  # the task's own pin agrees
        with compat.tf.Session() as session:
            session.run(compat.tf.reduce_sum(compat.tf.ones([256, 256])))
        os.write(write, str(len(os.listdir("/proc/self/task"))).encode())
        os._exit(0)
    os.close(write)
    held[threads] = int(os.read(read, 16))
    os.wait()
print("threads", held[1], held[3])
"""


@pytest.mark.cluster
def test_a_task_forked_from_a_loaded_server_runs_at_its_own_thread_count(procs):
    run = procs.start([sys.executable, "-c", REPINNED])
    assert run.wait(120) == 0, run.output
    one, three = (int(n) for n in run.lines[-1].split()[1:])
    assert three - one == 2, run.output
