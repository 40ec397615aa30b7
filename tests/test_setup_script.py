"""scripts/ensure_venv.sh, which both of the README's commands run first: its byte-compiling of the package is only
a saving, so it compiles what compiles and never stops the command (set -e) over a module that does not. And
run_tests.sh: its two passes of the whole suite, and the SIGINT its tests' processes get however it was started."""

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


def test_byte_compiling_compiles_what_it_can_and_never_stops_the_scripts(tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "parallel_tf").mkdir()
    (tmp_path / "parallel_tf" / "good.py").write_text("ANSWER = 42\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.py").write_text("def broken(:\n")  # a recipe being edited
    script = f'set -euo pipefail; REPO="{tmp_path}"; source "{REPO}/scripts/ensure_venv.sh"; byte_compile; echo on'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "on\n", "")
    assert [path.name for path in (tmp_path / "parallel_tf" / "__pycache__").iterdir()] == [
        f"good.{sys.implementation.cache_tag}.pyc"
    ]


FAKE_PYTHON = """#!/bin/bash
[ "$1 $2" = "-m pytest" ] || exit 0  # compileall
shift 2
{ printf '%s\\037' "$@"; echo; } >> "$CALLS"  # a pytest run a line, its arguments apart
case "$*" in *"not cluster"*) exit "$IN_PROCESS";; *" cluster"*) exit "$CLUSTER";; *) exit "$ARGUMENTS";; esac
"""


def _run_tests(tmp_path, *args, in_process=0, cluster=0, arguments=0, line=None):
    """REPO's run_tests.sh in a copy of the repository whose virtualenvs' programs (.venv's, .venv-tf1.15's) only
    say how they were called, and write "lint" where ruff is: each pytest run exits with the code given for its
    tests. `line`: PARALLEL_TF_TENSORFLOW. Returns (exit status, the pytest runs' arguments and the lints)."""
    (tmp_path / "scripts").mkdir()
    for name in ("run_tests.sh", "setup.py", "scripts/ensure_venv.sh"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    setup_hash = hashlib.sha256((REPO / "setup.py").read_bytes()).hexdigest()[:16]
    for venv, installed in ((".venv", ("cpu-dev", "gpu-dev")), (".venv-tf1.15", ("tf115-test",))):
        bin_ = tmp_path / venv / "bin"
        bin_.mkdir(parents=True)
        fakes = {"python": FAKE_PYTHON, "ruff": 'echo lint >> "$CALLS"', "lint-imports": "", "mypy": "", "mkdocs": ""}
        for program, text in fakes.items():
            (bin_ / program).write_text(text if text.startswith("#!") else f"#!/bin/bash\n{text}\n")
            (bin_ / program).chmod(0o755)
        for extras in installed:  # installed, whichever TensorFlow extra ensure_venv picks here
            (tmp_path / venv / f".installed-{setup_hash}-{extras}").touch()
    calls = tmp_path / "calls"
    calls.write_text("")
    codes = {"IN_PROCESS": in_process, "CLUSTER": cluster, "ARGUMENTS": arguments}
    env = {**os.environ, "CALLS": str(calls), **{name: str(code) for name, code in codes.items()}}
    env.pop("PARALLEL_TF_TENSORFLOW", None)
    env.update({"PARALLEL_TF_TENSORFLOW": line} if line else {})
    done = subprocess.run(["bash", "run_tests.sh", *args], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    said = calls.read_text().splitlines()
    return done.returncode, [call if call == "lint" else call.split("\037")[:-1] for call in said]


IN_PROCESS = ["-m", "not cluster", "-n", "2"]  # --dist loadfile: pyproject.toml's addopts
CLUSTER = ["-m", "cluster"]


@pytest.mark.parametrize(
    "in_process, cluster, status", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2), (5, 0, 5)], ids=str
)
def test_the_whole_suite_is_two_passes_that_both_run_and_the_first_failure_is_the_status(
    tmp_path, in_process, cluster, status
):
    """Every test is in one of the two passes (`cluster` or not), and both run: the exit status is the first one's
    failure, else the second's (pytest's 5, no tests, included)."""
    assert _run_tests(tmp_path, in_process=in_process, cluster=cluster) == (
        status,
        ["lint", "lint", IN_PROCESS, CLUSTER],
    )


def test_arguments_make_one_pytest_run_of_them(tmp_path):
    assert _run_tests(tmp_path, "-k", "sharder", arguments=5) == (5, ["lint", "lint", ["-k", "sharder"]])


def test_the_tensorflow_1_15_line_runs_the_same_passes_in_its_own_virtualenv_without_the_lint(tmp_path):
    assert _run_tests(tmp_path, line="1.15") == (0, [IN_PROCESS, CLUSTER])


def test_another_tensorflow_line_is_refused_in_one_line(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "ensure_venv.sh").write_bytes((REPO / "scripts" / "ensure_venv.sh").read_bytes())
    script = f'REPO="{tmp_path}"; source "{tmp_path}/scripts/ensure_venv.sh"; ensure_venv'
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PARALLEL_TF_TENSORFLOW": "1.14"},
    )
    assert (done.returncode, done.stderr) == (2, "error: PARALLEL_TF_TENSORFLOW=1.14: give 2 (the default) or 1.15\n")


def test_a_machine_without_python_3_7_is_told_how_to_get_one(tmp_path):
    """PATH without a python3.7 or a pyenv that has one (PYTHON unset): one line, exit 2, nothing installed."""
    (tmp_path / "bin").mkdir()
    for tool in ("bash", "sha256sum", "cut", "grep", "sort", "tail"):
        (tmp_path / "bin" / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    script = f'REPO="{tmp_path}"; source "{REPO}/scripts/ensure_venv.sh"; ensure_venv'
    environment = {"PATH": str(tmp_path / "bin"), "PARALLEL_TF_TENSORFLOW": "1.15", "HOME": str(tmp_path)}
    done = subprocess.run(
        [str(tmp_path / "bin" / "bash"), "-c", script], capture_output=True, text=True, timeout=60, env=environment
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: PARALLEL_TF_TENSORFLOW=1.15 needs a Python 3.7 (TensorFlow 1.15's), and none")
    assert not (tmp_path / ".venv-tf1.15").exists()


def test_a_started_process_gets_sigint(procs):
    run = procs.start([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"])
    assert run.wait(30) == 0 and run.lines == ["default_int_handler"], run.output


def test_a_started_process_gets_sigint_where_the_suite_was_started_with_it_ignored():
    """As a script's `./run_tests.sh &` starts it: the Ctrl-C tests' processes must still be stopped by SIGINT."""
    test = f"{Path(__file__)}::{test_a_started_process_gets_sigint.__name__}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert done.returncode == 0, done.stdout + done.stderr
