"""Runs of a recipe as child processes, one after another: what the benchmark and the study share.

Free of TensorFlow: it only starts processes and reads the outputs they leave in their logdir.
"""

import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np

from parallel_tf.launch import forkserver, warm_client
from parallel_tf.launch.fence import die_with_parent

RUN_TIMEOUT_SECS = 1800


def single_process_command(recipe_path):
    return [sys.executable, recipe_path]


def cluster_command(recipe_path, mode, num_workers, *launcher_flags):
    return [
        sys.executable,
        "-m",
        "parallel_tf.launch",
        f"--recipe={recipe_path}",
        f"--mode={mode}",
        f"--num_workers={num_workers}",
        *launcher_flags,
    ]


@contextlib.contextmanager
def warm_server(needed, tool):
    """The socket of a warm fork server (launch/warm_server.py), where `needed`, for runs whose launchers fork their
    tasks from it: TensorFlow loaded once for them all, not once a run, before any. None where not needed, off
    Linux, where no launcher forks, or where it did not start (`tool`, the bench or the study, says so)."""
    if not needed or not forkserver.SUPPORTED:
        yield None
        return
    try:
        with warm_client.running() as path:
            yield path
    except warm_client.WarmServerFailed as e:
        print(f"[{tool}] {e}: each run loads TensorFlow itself", flush=True)
        yield None


def forked_by_warm_server(log_path):
    """Whether the launch whose output is at `log_path` forked its tasks from a warm server (else its log says
    why not)."""
    with open(log_path, encoding="utf-8") as f:
        return any(line.startswith("[launch] forking the") and "of the warm server at" in line for line in f)


def out_dir(out, tool):
    return out or os.path.join("runs", time.strftime(f"{tool}-%Y%m%d-%H%M%S"))


class RunFailed(Exception):
    """A run exited non-zero: `returncode`, and a message ending with the tail of its output."""

    def __init__(self, returncode, output_tail):
        super().__init__(f"exited {returncode}; its output ends:\n{output_tail}")
        self.returncode = returncode
        self.output_tail = output_tail

    def error_line(self):
        """The run's own one-line complaint ('error: ...'), for a run that exited 2."""
        complaints = [line.split("error: ", 1)[1] for line in self.output_tail.splitlines() if "error: " in line]
        return complaints[-1] if complaints else f"exited {self.returncode}"


def run(command, logdir, task_flags, log_path=None, warm_server=None, environment=()):
    """Runs `command --logdir=logdir task_flags...` to completion; returns its summary.json.

    Its output goes to `log_path` when given, so a failure can be read in full afterwards. `warm_server`: the socket
    of a warm fork server (launch/warm_server.py) for its launcher to fork its tasks from. `environment`: (variable,
    value) pairs the run gets beside this process's environment.
    """
    served = ((warm_client.SOCKET_VARIABLE, warm_server),) if warm_server else ()
    done = subprocess.run(
        [*command, f"--logdir={logdir}", *task_flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **dict(environment), **dict(served)} if environment or served else None,
        timeout=RUN_TIMEOUT_SECS,
        preexec_fn=die_with_parent,  # a bench or study that is killed takes its run with it
    )
    if log_path:
        with open(log_path, "w", encoding="utf-8") as f:
            f.write(done.stdout)
    if done.returncode != 0:
        raise RunFailed(done.returncode, done.stdout[-2000:])
    return read_json(os.path.join(logdir, "summary.json"))


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_metrics(logdir):
    with open(os.path.join(logdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def max_param_difference(logdir_a, logdir_b):
    """The largest |a - b| over every parameter of two runs' params.npz."""
    with np.load(os.path.join(logdir_a, "params.npz")) as a, np.load(os.path.join(logdir_b, "params.npz")) as b:
        if sorted(a.files) != sorted(b.files):
            raise ValueError(f"{logdir_a} and {logdir_b} have different parameters")
        return max(float(np.abs(a[name].astype(np.float64) - b[name]).max()) for name in a.files)
