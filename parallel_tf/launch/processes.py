"""The processes of a local cluster: started together, their output relayed line by line with the
task's name, watched, and stopped together by PID. Free of TensorFlow, as the launcher is."""

import functools
import os
import signal
import subprocess
import sys
import threading
import time

from parallel_tf.launch import fence, forkserver

STOP_GRACE_SECS = 3.0
POLL_SECS = 0.1


class Cluster:
    """The running processes: started together, relayed line by line, stopped together."""

    def __init__(self, tasks, cuda_devices, spare_workers=0, namespaces=None, pins=None, needed=None):
        self.tasks = tasks
        # name: a process the tasks cannot go on without (the links' delay line): if it ends, the run fails
        self.needed = needed or {}
        self.cuda_devices = cuda_devices
        self.namespaces = namespaces or {}  # task name: the network namespace of its simulated host
        self.spare_workers = spare_workers  # backup workers: this many non-chief workers may die
        # (intra_op_threads, kernels): the tasks are this package's, forked with TensorFlow loaded so (forkserver.py);
        # None: each is a process of its own. Not with GPUs, whose device each task must see before CUDA loads.
        self.pins = pins if pins and forkserver.SUPPORTED and not cuda_devices else None
        if pins and not self.pins:
            why = "with GPUs, each must see only its own device as CUDA loads" if cuda_devices else "Linux only"
            say(f"each task is a process of its own, not forked: {why}")
        self.server = None
        self.lost = []
        self.procs = {}
        self.relays = []
        self.print_lock = threading.Lock()

    def run(self):
        """Runs every task to the end; returns (name, exit code) of the first that failed, or None."""
        started = time.time()
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            if self.pins:
                self._fork_all()
            else:
                for name, command in self.tasks:
                    self._start(name, command)
            failed = self._wait()
        finally:
            self.stop()
        if failed:
            return failed
        elapsed = time.time() - started
        if self.lost:
            survivors = len(self.procs) - len(self.lost)
            say(f"the other {survivors} tasks exited 0 in {elapsed:.1f}s; lost {', '.join(self.lost)}")
        else:
            say(f"all {len(self.procs)} tasks exited 0 in {elapsed:.1f}s")
        return None

    def _start(self, name, command):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if name in self.cuda_devices:
            env["CUDA_VISIBLE_DEVICES"] = self.cuda_devices[name]
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the launcher only; it stops the tasks itself
            preexec_fn=functools.partial(_prepare_child, self.namespaces.get(name)),
        )
        self._started(name, proc)

    def _fork_all(self):
        self.server = forkserver.ForkServer(self.tasks, self.pins, self.namespaces)
        if self.server.why_not_warm:
            say(f"the warm fork server did not take this launch: {self.server.why_not_warm}")
        count, pid = len(self.tasks), self.server.process.pid
        if self.server.warm:
            say(f"forking the {count} tasks in a fork server (pid {pid}) of the warm server at {self.server.warm}")
        else:
            say(f"loading TensorFlow once for the {count} tasks, in a fork server (pid {pid})")
        forked = self.server.started()
        for name, _ in self.tasks:
            self._started(name, forked[name])

    def _started(self, name, proc):
        self.procs[name] = proc
        say(f"started {name} (pid {proc.pid})")
        relay = threading.Thread(target=self._relay, args=(name, proc.stdout), daemon=True)
        relay.start()
        self.relays.append(relay)

    def _relay(self, name, stream):
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.print_lock:
                print(f"[{name}] {line}", flush=True)

    def _wait(self):
        """Returns (name, exit code) of the first task to fail, or None when all exit 0 (or were spare).

        Of tasks found failed in the same poll, one killed by a signal is named first: its peers exit 1
        within milliseconds of losing it (an all-reduce's ring breaks at once), and it is the cause."""
        while True:
            for name, proc in self.needed.items():
                if proc.poll() is not None:
                    return name, proc.returncode
            codes = {name: proc.poll() for name, proc in self.procs.items() if name not in self.lost}
            failed = [(name, code) for name, code in codes.items() if code not in (None, 0)]
            for name, code in sorted(failed, key=lambda failure: failure[1] > 0):  # killed by a signal: < 0
                if not self._can_lose(name):
                    return name, code
                self.lost.append(name)
                say(f"{name} {describe_exit(code)}; training goes on without it (backup workers)")
            if all(code == 0 for name, code in codes.items() if name not in self.lost):
                return None
            time.sleep(POLL_SECS)

    def _can_lose(self, name):
        return name.startswith("worker:") and name != "worker:0" and len(self.lost) < self.spare_workers

    def stop(self):
        """SIGTERM every live task by PID, SIGKILL what is left after a grace period, reap all."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.time() + STOP_GRACE_SECS
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.server:
            self.server.stop(STOP_GRACE_SECS)
        for relay in self.relays:
            relay.join(timeout=1.0)

    def _on_signal(self, signum, _frame):
        say(f"{signal.Signals(signum).name}: stopping all tasks")
        self.stop()
        sys.exit(128 + signum)


def describe_exit(code):
    if code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}" + (" (bad configuration)" if code == 2 else "")


def say(message):
    print(f"[launch] {message}", flush=True)


def _prepare_child(namespace):
    fence.die_with_parent()
    if namespace:
        fence.enter_network_namespace(namespace)
