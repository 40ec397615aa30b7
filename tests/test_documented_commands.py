"""Every command README.md and docs/ show is a promise: each is run here as a user would paste it, from the
repository's root, through the checks a start makes before anything starts (the launcher's, the study's and
the bench's --dry_run; a task's --check_flags), or run for real with its steps cut down, or named with the test
that runs it. A command the docs show that no rule here covers fails test_every_documented_command_is_covered:
adding one to the docs means saying how it is checked.

A command's comment in the docs is held to it too: "refused" means exit 2 and one line, "N runs" the runs
a dry run plans."""

import concurrent.futures
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import REPO, SHOW_DISTRIBUTION, study_command

from parallel_tf.backports import removesuffix, shlex_join

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PYTHON = r"(?:\.venv/bin/)?python3?(?: -u)?"
TIMEOUT = 120
# A documented placeholder and the value it stands for here.
PLACEHOLDERS = {"IMAGE": "registry.example/parallel_tf:1", "R": "100mbit", "<recipe>": "mnist"}
# An srun step of 3 tasks on one node, as Slurm describes it to each task (the chief: rank 1, after the ps).
SLURM_STEP = {
    "SLURM_STEP_NODELIST": "localhost",
    "SLURM_STEP_TASKS_PER_NODE": "3",
    "SLURM_STEP_NUM_TASKS": "3",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
}


@dataclasses.dataclass(frozen=True)
class Documented:
    page: str
    line: int
    command: str
    comment: str  # what the docs say of it on its line, after "#"
    inline: bool = False  # in a line of prose, not a code block

    @property
    def named_only(self):
        """A tool named in prose without arguments (`python -m parallel_tf.k8s`): a name, checked by its --help."""
        return self.inline and " --" not in self.command

    @property
    def name(self):
        return f"{self.page}:{self.line}"


def documented_commands():
    """Every command of the pages: each line of a code block that starts with a command, its continuation lines
    joined and its variables ($SPEC) filled from the block, and each inline code span that is one."""
    found = []
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(REPO))
        for block in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
            first_line = text.count("\n", 0, block.start(1)) + 1
            found += _block_commands(block[1], name, first_line)
        prose = re.sub(r"```.*?```", lambda block: "\n" * block[0].count("\n"), text, flags=re.S)
        for span in re.finditer(r"`([^`\n]+)`", prose):
            if COMMAND.match(span[1]):
                found.append(Documented(name, prose.count("\n", 0, span.start()) + 1, span[1], "", inline=True))
    return found


COMMAND = re.compile(rf"(\./|scripts/|{PYTHON} |srun |sbatch |kubectl |tensorboard|\.venv/bin/tensorboard|qemu-x86_64)")


def _block_commands(block, page, first_line):
    variables, found = {}, []
    lines = block.split("\n")
    index = 0
    while index < len(lines):
        number, line = first_line + index, lines[index]
        while line.rstrip().endswith("\\") and index + 1 < len(lines):
            index += 1
            line = line.rstrip()[:-1] + " " + lines[index].strip()
        index += 1
        command, _, comment = line.strip().partition("  #")
        assignment = re.fullmatch(r"([A-Z_]+)=\"?([^\"]*)\"?", command.strip())
        if assignment:
            variables[assignment[1]] = assignment[2]
        elif COMMAND.match(command.strip()):
            for variable, value in variables.items():
                command = command.replace(f"${variable}", value)
            found.append(Documented(page, number, command.strip(), comment.strip()))
    return found


# Commands run elsewhere, each with the test (or CI step) that runs it: that test must exist.
RUN_ELSEWHERE = {
    r"\./run_tests\.sh$": ".ci/run",
    r"scripts/slurm_local\.sh (up|down)": ".ci/run",
    r"scripts/slurm_local\.sh run srun": "tests/test_slurm_real.py::test_every_task_gets_an_address_on_its_own_node",
    r"sbatch examples/slurm_sync\.sbatch": "tests/test_slurm_real.py::test_sbatch_example_killed_on_its_step_and",
    r"kubectl apply": "tests/test_k8s.py::test_manifest_is_valid_for_the_crd_and_the_webhook",
    rf"{PYTHON} recipes/\S+ --cluster_resolver=tfjob": "tests/test_k8s.py::test_hierarchical_tfjob_pods_train_with",
    r"qemu-x86_64": "tests/test_portable_bits.py::test_short_runs_end_on_the_native_bits_on_emulated_amd_and_intel",
    rf"{PYTHON} scripts/tf115_api_manifest\.py": "tests/test_tf115_api.py::test_the_package_uses_only_tensorflow_1_15",
    rf"{PYTHON} -m parallel_tf\.tools\.tf_strategies": "tests/test_links.py::test_a_peer_runs_on_the_same_link",
    rf"{PYTHON} -m parallel_tf\.launch\.warm_server": "tests/test_warm_server.py::test_launches_from_the_warm_server",
    rf"{PYTHON} tests/link_probe\.py": "tests/test_delay_line.py::test_a_delayed_link_takes_its_round_trip_and_a",
    r"(\.venv/bin/)?tensorboard --logdir": "setup.py",  # installed with the package: its console script
    r"scripts/ensure_venv\.sh": "run_tests.sh",  # what both of the README's commands run first
}
# The strict studies of docs/reproducibility.md, run for real (test_the_strict_studies_...).
RUN_HERE = (r"parallel_tf\.study .*--strict_determinism",)


def check_of(documented, tmp):
    """(the command that checks it, extra environment), or None where it is run elsewhere or here (RUN_ELSEWHERE,
    RUN_HERE); raises LookupError for a command no rule covers."""
    command = documented.command
    for placeholder, value in PLACEHOLDERS.items():
        command = re.sub(rf"(?<![\w<-]){re.escape(placeholder)}(?![\w>])", value, command)
    command = command.replace("=...", f"={tmp / 'given'}")
    if any(re.match(pattern, command) for pattern in RUN_ELSEWHERE) or any(re.search(p, command) for p in RUN_HERE):
        return None
    if command.startswith("./run_tests.sh "):  # one pytest run of its arguments: how it would distribute them
        return [sys.executable, "-m", "pytest", *shlex.split(command)[1:]], {SHOW_DISTRIBUTION: "1"}
    slurm = command.startswith("srun ")
    words = shlex.split(re.sub(r"^(srun (--\S+ )*)", "", command))
    program, args = _program(words), words[_first_flag(words) :]
    if program is None:
        raise LookupError(f"{documented.name}: no rule checks {documented.command!r}")
    if documented.named_only or "--help" in args:
        return [sys.executable, *program, "--help"], {}
    if "[--" in command:  # a synopsis: every flag in it must be one the command takes
        return [sys.executable, *program, "--helpfull"], {}
    if program == ["-m", "parallel_tf.k8s"]:  # it writes a manifest: here, into tmp
        return [
            sys.executable,
            *program,
            *(a for a in args if not a.startswith("--output=")),
            f"--output={tmp}/t.json",
        ], {}
    if program[0] == "-m":
        return [sys.executable, *program, *args, "--dry_run"], {}
    return [sys.executable, *program, *args, "--check_flags"], (SLURM_STEP if slurm else {})


def _program(words):
    """The python arguments that name the documented program (a module or a recipe), or None for another."""
    if words[0] == "./run_local_cluster.sh":
        return ["-m", "parallel_tf.launch"]
    if not re.fullmatch(removesuffix(PYTHON, "(?: -u)?"), words[0]):
        return None
    words = [word for word in words[1:] if word != "-u"]
    if words[0] == "-m" and words[1] in {f"parallel_tf.{tool}" for tool in ("launch", "study", "bench", "k8s")}:
        return words[:2]
    return words[:1] if re.fullmatch(r"recipes/\w+\.py", words[0]) else None


def _first_flag(words):
    return next((i for i, word in enumerate(words) if word.startswith("--")), len(words))


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """{name: (documented, the command, its environment, exit code, output)} of every documented command checked
    here, each distinct command once, three at a time, from the repository's root, as a user would paste them."""
    tmp = tmp_path_factory.mktemp("documented")
    checks = {}
    for documented in documented_commands():
        check = check_of(documented, tmp)
        if check:
            checks[documented.name] = (documented, *check)
    distinct = {json.dumps(check[1:]): check[1:] for check in checks.values()}

    def run(command, environment):
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO, env={**os.environ, **environment}
        )
        return done.returncode, done.stdout + done.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {key: pool.submit(run, *check) for key, check in distinct.items()}
        outcomes = {key: future.result() for key, future in futures.items()}
    return {
        name: (d, command, env, *outcomes[json.dumps([command, env])]) for name, (d, command, env) in checks.items()
    }


def test_every_documented_command_is_covered(tmp_path, capsys):
    """No documented command without a rule; the counts, for the record (pytest -s shows them)."""
    commands = documented_commands()
    uncovered, counts = [], {"checked before start": 0, "run here": 0, "run elsewhere": 0}
    for documented in commands:
        try:
            check = check_of(documented, tmp_path)
        except LookupError as e:
            uncovered.append(str(e))
            continue
        if check:
            counts["checked before start"] += 1
        elif any(re.search(pattern, documented.command) for pattern in RUN_HERE):
            counts["run here"] += 1
        else:
            counts["run elsewhere"] += 1
    assert not uncovered, "\n".join(uncovered)
    assert len(commands) > 80 and counts["run here"] == 2
    with capsys.disabled():
        print(f"\n{len(commands)} documented commands: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))


def test_each_command_run_elsewhere_names_a_test_that_exists():
    """A test named must exist; a file named (CI's script, setup.py, run_tests.sh) must run or install the program."""
    for pattern, where in RUN_ELSEWHERE.items():
        path, _, test = where.partition("::")
        text = (REPO / path).read_text()
        if test:
            assert re.search(rf"^def {re.escape(test)}", text, re.M), f"{pattern}: no {where}"
        else:
            program = re.sub(r"[\\^$()?]|\(.*\)\?", "", pattern).split()[0].rsplit("/", 1)[-1]
            assert program in text, f"{pattern}: {path} does not run {program}"


@pytest.mark.cluster
@pytest.mark.parametrize("name", sorted({d.name for d in documented_commands()}))
def test_a_documented_command_passes_the_checks_of_a_start(checked, name):
    if name not in checked:
        pytest.skip("run elsewhere, or by a test of its own here")
    documented, command, environment, code, output = checked[name]
    lines = [line for line in output.splitlines() if line.strip()]
    where = f"{name}: {documented.command}\n$ {shlex_join(command)}\n{output}"
    if "refused" in documented.comment:
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), where
        return
    assert code == 0, where
    if "--helpfull" in command:  # a synopsis
        synopsis = set(re.findall(r"--(\w+)", documented.command))
        known = set(re.findall(r"^\s+--(?:\[no\])?(\w+)", output, re.M))
        assert synopsis <= known, f"{where}\nnot flags of the launcher: {sorted(synopsis - known)}"
    if SHOW_DISTRIBUTION in environment:  # the suite's own distribution: a file to a worker (pyproject.toml)
        assert re.search(r"^distribution: loadfile over", output, re.M), where
    planned = re.search(r"(\d+) runs", documented.comment)
    if planned:
        assert f"[bench] --dry_run: {planned[1]} runs planned" in output, where


@pytest.mark.cluster
def test_the_strict_studies_report_one_hash_over_their_worker_counts(procs, tmp_path):
    """docs/reproducibility.md's two strict studies, as written there, at 20 steps: one params_sha256 for every
    worker count, all-reduce's the same as sync's, and each the reference's."""
    studies = [d for d in documented_commands() if any(re.search(p, d.command) for p in RUN_HERE)]
    assert len({d.command for d in studies}) == 2
    for index, documented in enumerate(dict.fromkeys(d.command for d in studies)):
        out = tmp_path / f"study{index}"
        args = shlex.split(documented)[3:]
        run = procs.start(study_command(*args, f"--out={out}", "--train_steps=20", "--log_every=10"))
        assert run.wait(600) == 0, run.output
        report = json.loads((out / "report.json").read_text())
        hashes = {row["params_sha256"] for row in [report["reference"], *report["runs"]]}
        assert len(hashes) == 1, report["runs"]
        workers = sorted({row["workers"] for row in report["runs"]})
        assert workers == [int(n) for n in re.search(r"--workers=([\d,]+)", documented)[1].split(",")]
        assert all(verdict["identical_across_workers"] for verdict in report["verdicts"].values())
