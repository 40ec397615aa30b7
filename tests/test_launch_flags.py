"""`--` only separates: a run flag after it is the launcher's as before it (launcher.parse_launch_flags), so the fork
server's pins, the summary line, the logdir's name and the finished-run check use the values the tasks get. Each
case runs the launcher's --dry_run (every check a start makes, nothing started) with the flag on either side."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import REPO, launcher_command

from parallel_tf import compat

pytestmark = pytest.mark.cluster
TIMEOUT = 60
STAMP = re.compile(r"\d{8}-\d{6}(-\d+)?")  # a default logdir's time


def dry_run(*args, env=None):
    """(exit code, what it said, its time stamps made alike)."""
    done = subprocess.run(
        [sys.executable, "-m", "parallel_tf.launch", "--dry_run", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
        env=env,
    )
    return done.returncode, STAMP.sub("TIME", done.stdout + done.stderr)


@pytest.mark.parametrize(
    "flag, said",
    [
        ("--kernels=fast", "--kernels=fast"),
        ("--intra_op_threads=1", "--intra_op_threads=1"),
        ("--mode=async", "runs/mnist-async-TIME"),
    ],
)
def test_a_run_flag_after_the_separator_plans_what_it_does_before_it(flag, said):
    before, after = dry_run(flag), dry_run("--", flag)
    assert before == after
    assert before[0] == 0 and said in before[1], before[1]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_launch_shares_the_cores_between_its_workers(workers):
    """Unset, every task gets this machine's cores // the workers, at least 1 (2 cores: 2, 1, 1); the user's
    TF_NUM_INTRAOP_THREADS wins; --intra_op_threads is as given."""
    shared = max(1, len(os.sched_getaffinity(0)) // workers)
    for env, given, expected in (
        (None, (), shared),
        ({**_unpinned(), compat.INTRA_OP_THREADS: "3"}, (), 3),
        (None, ("--intra_op_threads=5",), 5),
    ):
        code, said = dry_run(f"--num_workers={workers}", *given, env=env)
        tasks = [line for line in said.splitlines() if " --task_index=" in line]
        assert code == 0 and len(tasks) == workers + 1, said
        assert all(f" --intra_op_threads={expected} " in f"{line} " for line in tasks), said


def _unpinned():
    """This environment without the pins this test process's TensorFlow set (compat.SET_BY_PARALLEL_TF)."""
    pinned = (compat.INTRA_OP_THREADS, *compat.KERNEL_VARIABLES, compat.SET_BY_PARALLEL_TF)
    return {name: value for name, value in os.environ.items() if name not in pinned}


def test_more_steps_after_the_separator_train_a_finished_run_on(tmp_path):
    """A finished 1000-step run: --train_steps=1010 trains it on, before `--` or after it."""
    (tmp_path / "summary.json").write_text(json.dumps({"train_steps": 1000}))
    before = dry_run(f"--logdir={tmp_path}", "--train_steps=1010")
    after = dry_run(f"--logdir={tmp_path}", "--", "--train_steps=1010")
    assert before == after
    assert before[0] == 0, before[1]


def test_a_task_names_itself_and_the_pins_after_the_separator_are_the_fork_server_s(procs, tmp_path):
    """Forked by the launcher's fork server, worker 1 still shows as itself (`pgrep -f`, as the docs show), and the
    kernels and threads given after `--` are what the fork server loaded TensorFlow with: the run trains on them."""
    logdir = tmp_path / "run"
    run = procs.start(launcher_command(f"--logdir={logdir}", "--train_steps=3000", "--", *FAST_ONE_THREAD))
    started = run.wait_for_line(r"started worker:1 \(pid \d+\)", TIMEOUT)
    pid = int(re.search(r"pid (\d+)", started)[1])
    pattern = f"parallel_tf worker:1 {logdir} "
    found = _pgrep(pattern)
    assert found == [pid], (found, pid, run.output)
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    kernels = json.loads((logdir / "summary.json").read_text())["kernels"]
    assert (kernels["kernels"], kernels["intra_op_threads"]) == ("fast", 1)


FAST_ONE_THREAD = ("--kernels=fast", "--intra_op_threads=1")
RUN_TIMEOUT = 120


def _pgrep(pattern):
    """The PIDs `pgrep -f PATTERN` finds, once the task has named itself (it does as it parses its flags)."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        if found:
            return [int(pid) for pid in found]
        time.sleep(0.1)
    return []
