"""A local cluster's tasks forked from one process that has loaded TensorFlow, instead of each loading it.

A task's start is mostly TensorFlow's import (2.1 s of CPU here), and a local cluster's tasks share one machine's
cores, so N tasks importing at once cost N imports. The fork server loads TensorFlow once, pinned as every task
pins it (compat.pin_before_loading, from the run's --intra_op_threads and --kernels), then forks each task, which
runs its recipe as `python -u RECIPE FLAGS...` would. A task still makes its own pins and checks them against what
loaded: one that disagrees is refused in one line (exit 2), never run on the other kernels.

Where a warm fork server runs (warm_server.py, PARALLEL_TF_WARM_SERVER), the launch's server is a child of it,
forked with TensorFlow loaded already, that takes the same request and pipes.

The server is the tasks' parent: it reports each one's PID as it starts and its exit code as it ends, on a pipe of
the launcher's (`started NAME PID`, `exited PID CODE`, CODE < 0 for a signal, as Popen's returncode). Each task's
output goes to a pipe of its own, as a Popen'd task's does; its simulated host, if it has one, is entered by the
path of that host's network namespace. Free of TensorFlow until the server loads it: the launcher imports this.

The tasks share the server's session, where a Popen'd task is a session of its own: the kernel's scheduler
(autogroups) then shares the cores among the cluster's threads, not equally among its tasks, so a busy parameter
server is not held to 1/N of them. With forking's shared pages, that makes a step faster too (BENCHMARKS.md,
"Starting the tasks"); the bits are the same.
"""

import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import threading

from parallel_tf import compat
from parallel_tf.backports import pidfd_open, pidfd_send_signal, waitstatus_to_exitcode
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.launch import fence, warm_client

EXITED_WITH_SERVER = -signal.SIGTERM  # a task the server did not see exit: its death signal (fence.die_with_parent)
# Forking a process that has loaded TensorFlow, and the parent death signal its tasks get, are Linux's.
SUPPORTED = sys.platform.startswith("linux")


class ForkedTask:
    """A task the server forked, watched and stopped as a subprocess.Popen is: poll, wait, terminate, kill."""

    def __init__(self, name, pid, stdout):
        self.name = name
        self.pid = pid
        self.stdout = stdout
        self.returncode = None
        self._exited = threading.Event()
        # Its server, not the launcher, reaps it: a signal goes through a pidfd, which a later process given its
        # number cannot receive. None where it has gone already (its exit code is on its way), or where the kernel
        # has no pidfds (before Linux 5.3): there, by its number.
        self._pidfd = None
        self._by_number = False
        self._pidfd_lock = threading.Lock()  # the watch thread closes it as the launcher's may signal through it
        try:
            self._pidfd = pidfd_open(pid)
        except ProcessLookupError:
            pass
        except OSError:
            self._by_number = True

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.name, timeout)
        return self.returncode

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def _signal(self, signum):
        with self._pidfd_lock, contextlib.suppress(ProcessLookupError):  # exited: its code is on its way
            if self._pidfd is not None:
                pidfd_send_signal(self._pidfd, signum)
            elif self._by_number and self.returncode is None:
                os.kill(self.pid, signum)

    def exited(self, code):
        with self._pidfd_lock:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        self.returncode = code
        self._exited.set()


class ForkServer:
    """Starts the server, which forks `tasks` [(name, [python, -u, recipe, flags...])] once TensorFlow has loaded.
    `pins`: (intra_op_threads, kernels), the run's flags (None: not given); `namespaces`: {name: the path of its
    simulated host's network namespace}."""

    def __init__(self, tasks, pins, namespaces):
        self.forked = False
        self._outputs = {name: os.pipe() for name, _ in tasks}  # name: (read end, write end)
        report_read, report_write = os.pipe()
        write_ends = [report_write, *(write for _, write in self._outputs.values())]
        request = {
            "pins": list(pins),
            "report_fd": report_write,
            "tasks": [
                {
                    "name": name,
                    "argv": command[2:],
                    "output_fd": self._outputs[name][1],
                    "namespace": namespaces.get(name),
                }
                for name, command in tasks
            ],
        }
        # A warm server's socket (warm_server.py), where one forks this launch's server: TensorFlow loaded already
        self.warm = os.environ.get(warm_client.SOCKET_VARIABLE) or None
        self.why_not_warm = None  # why the warm server did not, in its words
        if self.warm:
            self.process, self.why_not_warm = warm_client.connect(self.warm, request, write_ends, pins)
            if self.process:
                self._hand_over(report_read, write_ends)
                return
            self.warm = None
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", __name__],
            stdin=subprocess.PIPE,
            pass_fds=write_ends,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            start_new_session=True,  # as the tasks: Ctrl-C reaches the launcher only
            preexec_fn=fence.die_with_parent,
        )
        self._hand_over(report_read, write_ends)
        self.process.stdin.write(json.dumps(request).encode())
        self.process.stdin.close()

    def _hand_over(self, report_read, write_ends):
        """The pipes' write ends are the server's now; the launcher reads the reports."""
        for write in write_ends:
            os.close(write)
        self._reports = os.fdopen(report_read, "rb")

    def started(self):
        """{name: ForkedTask} once every task has started; TaskFailure if the server ended first."""
        forked = {}
        for line in self._reports:
            _, name, pid = line.decode().split()
            forked[name] = ForkedTask(name, int(pid), os.fdopen(self._outputs[name][0], "rb"))
            if len(forked) == len(self._outputs):
                self.forked = True
                threading.Thread(target=_watch, args=(self._reports, forked), daemon=True).start()
                return forked
        code = self.process.wait()
        raise TaskFailure(f"the fork server exited with status {code} before it started every task (see above)")

    def stop(self, grace_secs):
        """Waits for the server, which exits once its tasks have; kills it after `grace_secs`. One still loading
        TensorFlow is stopped at once: it has started nothing yet."""
        if not self.forked:
            self.process.terminate()
        try:
            self.process.wait(timeout=grace_secs)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _watch(reports, forked):
    """Hands each task its exit code as the server reports it; a task still running when the server is gone was
    sent its death signal."""
    by_pid = {task.pid: task for task in forked.values()}
    for line in reports:
        _, pid, code = line.decode().split()
        by_pid.pop(int(pid)).exited(int(code))
    for task in by_pid.values():
        task.exited(EXITED_WITH_SERVER)


def serve(request):
    """The server: loads TensorFlow, forks every task, reports them; returns the task to run in a child, None in the
    server once every task has exited."""
    load_tensorflow(*request["pins"])
    return fork_tasks(request)


def fork_tasks(request, once_forked=None):
    """Forks every task of `request`, reports each as it starts and exits; returns the task to run in a child, None
    once every task has exited. A request's `close_in_tasks` are more fds no task is to keep. `once_forked` runs in
    this process once every task is forked: a thread it starts (the warm server's watch) is never forked with a
    task, as a fork of a threaded process is what every runtime warns against."""
    report = request["report_fd"]
    fds = [report, *request.get("close_in_tasks", ()), *(task["output_fd"] for task in request["tasks"])]
    for task in request["tasks"]:
        pid = os.fork()
        if pid == 0:
            _enter_task(task, fds)
            return task
        os.close(task["output_fd"])
        fds.remove(task["output_fd"])
        os.write(report, f"started {task['name']} {pid}\n".encode())
    if once_forked:
        once_forked()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        os.write(report, f"exited {pid} {waitstatus_to_exitcode(status)}\n".encode())


def load_tensorflow(intra_op_threads, kernels):
    """TensorFlow, loaded as a task would load it with these flags; where the pins are refused (the user's
    environment says otherwise), it is left unloaded, and each task refuses them in its own words."""
    try:
        compat.pin_before_loading(intra_op_threads, kernels)
    except ConfigError:
        return
    compat.tf.constant  # noqa: B018 (the first use of `tf` loads it)
    import parallel_tf.training.task  # noqa: F401 (what every recipe imports)


def _enter_task(task, fds):
    """In the child: the task's output, stdin and parent death signal as a Popen'd task has them, its host."""
    os.dup2(task["output_fd"], 1)
    os.dup2(task["output_fd"], 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd in [devnull, *fds]:
        os.close(fd)
    fence.die_with_parent()
    if task["namespace"]:
        fence.enter_network_namespace(task["namespace"])
    sys.argv = task["argv"]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python RECIPE` has it


def run_task(task):
    """In a task's child: its recipe, as `python -u RECIPE FLAGS...` runs it."""
    runpy.run_path(task["argv"][0], run_name="__main__")


if __name__ == "__main__":
    child = serve(json.load(sys.stdin))
    if child:
        run_task(child)
