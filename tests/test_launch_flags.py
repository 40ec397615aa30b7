"""`--` only separates: a run flag after it is the launcher's as before it (launcher.parse_launch_flags), so the fork
server's pins, the summary line, the logdir's name and the finished-run check use the values the tasks get. Each
case runs the launcher's --dry_run (every check a start makes, nothing started) with the flag on either side."""

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.cluster
TIMEOUT = 60
STAMP = re.compile(r"\d{8}-\d{6}(-\d+)?")  # a default logdir's time


def dry_run(*args):
    """(exit code, what it said, its time stamps made alike)."""
    done = subprocess.run(
        [sys.executable, "-m", "parallel_tf.launch", "--dry_run", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
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


def test_more_steps_after_the_separator_train_a_finished_run_on(tmp_path):
    """A finished 1000-step run: --train_steps=1010 trains it on, before `--` or after it."""
    (tmp_path / "summary.json").write_text(json.dumps({"train_steps": 1000}))
    before = dry_run(f"--logdir={tmp_path}", "--train_steps=1010")
    after = dry_run(f"--logdir={tmp_path}", "--", "--train_steps=1010")
    assert before == after
    assert before[0] == 0, before[1]

