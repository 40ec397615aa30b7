"""The docs cannot go stale silently: every file path, test and flag they name exists, and the
numbers they quote from a test are that test's numbers."""

import ast
import itertools
import re
import signal

import pytest
import test_bad_input
import test_composition
import test_traffic
from conftest import REPO

from parallel_tf import compat
from parallel_tf.training import modes, techniques

DOCS = [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").rglob("*.md"))]
TECHNIQUES = {module.TECHNIQUE.name for module in techniques.TECHNIQUES}
# A path the docs name: under a folder of the repository, ending in a file name with an extension
# or in "/" (a folder). "examples/sec" is a unit, not a path.
PATH = re.compile(
    r"(?<![\w/.-])((?:parallel_tf|tests|scripts|examples|recipes|docs|\.ci)/(?:[\w.-]+/)*(?:[\w-]+\.\w+)?)"
)
TEST = re.compile(r"\b(test_\w+?)(?:\.py)?(?:::(test_\w+))?\b")
FLAG = re.compile(r"(?<![\w-])--([a-z][\w-]*)")
# Flags of other programs that the docs show: absl's help, srun/scancel, unshare, iptables and mkdocs.
OTHER_PROGRAMS_FLAGS = {
    "help",
    "helpfull",
    "kill-on-bad-exit",
    "nodes",
    "signal",
    "map-root-user",
    "net",
    "user",
    "dport",
    "strict",
}


def doc_ids():
    return [str(doc.relative_to(REPO)) for doc in DOCS]


def functions_by_test_module():
    """{module: names of its test functions} for every tests/test_*.py."""
    return {
        path.stem: {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}
        for path in (REPO / "tests").glob("test_*.py")
    }


def defined_flags():
    """Every absl flag the package and the recipes define (a boolean also as --noNAME)."""
    sources = [*(REPO / "parallel_tf").rglob("*.py"), *(REPO / "recipes").glob("*.py")]
    # define_float: absl's float, finite (cli.py); `name: type = flag(`: a declaration's typed field, absl's defined
    # from it (declarations.flag)
    definer = r'(?:DEFINE_\w+|define_float)\(\s*"(\w+)"|^ +(\w+): [^=\n]+= flag\('
    found = (re.findall(definer, path.read_text(), re.MULTILINE) for path in sources)
    names = {defined or declared for matches in found for defined, declared in matches}
    return names | {f"no{name}" for name in names}


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_path_the_docs_name_exists(doc):
    missing = sorted({path for path in PATH.findall(doc.read_text()) if not (REPO / path).exists()})
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_test_the_docs_name_exists(doc):
    functions = functions_by_test_module()
    every_function = set().union(*functions.values())
    missing = []
    for module, function in TEST.findall(doc.read_text()):
        if function:
            found = function in functions.get(module, ())
        else:  # a module, a function named alone, or a script of the same name
            found = module in functions or module in every_function or (REPO / "scripts" / f"{module}.sh").exists()
        if not found:
            missing.append(f"{module}::{function}" if function else module)
    assert not missing, f"{doc.name} names tests that do not exist: {sorted(set(missing))}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_every_flag_the_docs_name_is_defined(doc):
    unknown = sorted(set(FLAG.findall(doc.read_text())) - defined_flags() - OTHER_PROGRAMS_FLAGS)
    assert not unknown, f"{doc.name} names flags nothing defines: {unknown}"


def test_the_checks_catch_a_stale_name(tmp_path):
    stale = "See `tests/test_gone.py::test_vanished`, `scripts/gone.sh` and --no_such_flag."
    assert PATH.findall(stale) == ["tests/test_gone.py", "scripts/gone.sh"]
    assert TEST.findall(stale) == [("test_gone", "test_vanished")]
    assert "no_such_flag" not in defined_flags() and FLAG.findall(stale) == ["no_such_flag"]


def test_the_docs_quote_the_traffic_test_s_bytes():
    sent = test_traffic.FLOAT_GRADIENT + test_traffic.BESIDES_THE_GRADIENT
    assert f"the chief sends {sent} bytes" in docs_text()
    assert f"and receives {test_traffic.RECEIVED})" in docs_text()


@pytest.mark.skipif(compat.tensorflow_1(), reason="on TensorFlow 1.15 a half-precision ring is refused: other counts")
def test_the_docs_quote_the_composition_test_s_counts():
    runs, composed = len(test_composition.RUNS), len(test_composition.COMPOSED)
    refused, by_rules = len(test_composition.REFUSALS), len(test_composition.BY_THE_RULES)
    pairs, linked = len(test_composition.OUTCOMES), composed - runs
    quoted = f"every mode × pair of techniques and options ({pairs}): {refused - by_rules} are refused because a"
    quoted_too = f"{by_rules} by the rules (each for a reason one of the two declares), {linked} compose `--link_rate`"
    quoted_last = f"network to shape), and {runs} train"
    of_a_mode = [*test_composition.RUNS, *test_composition.BY_THE_RULES]  # not refused for a declaration's modes
    looped = [pair for pair in of_a_mode if "steps_per_run" in pair and TECHNIQUES & set(pair)]
    trained = len([pair for pair in looped if pair in test_composition.RUNS])
    refused_loops = len(looped) - trained
    quoted_loops = f"{trained} of the technique and loop pairs train, {refused_loops} are refused, each with why"
    text = docs_text()
    quotes = (quoted, quoted_too, quoted_last, quoted_loops)
    assert all(q in text for q in quotes), "the docs' counts differ from test_composition.py"


def test_the_docs_quote_the_bad_input_test_s_case_count():
    count, in_process = len(test_bad_input.case_names()), len(test_bad_input.FLAGS_ONLY)
    assert f"runs every mistake we know of ({count})" in docs_text()
    assert f"the {in_process} a task refuses from its flags alone" in docs_text()


def docs_text():
    """Every doc's text, its lines joined by spaces: a quoted phrase may wrap anywhere."""
    return " ".join(" ".join(doc.read_text() for doc in DOCS).split())


def test_commands_that_run_the_package_use_the_virtualenv_s_python():
    """A new user's shell has no absl: every README command that runs a recipe or a module of the package
    names .venv's Python (the launcher and the tests make it), so it works as written."""
    commands = re.findall(
        r"^(?:srun )?(\S*python3?) (?:recipes/|-m parallel_tf)", (REPO / "README.md").read_text(), re.M
    )
    assert commands and set(commands) == {".venv/bin/python"}


def test_every_exit_code_the_launcher_gives_is_documented():
    """0, 1, 2, and 128 + SIGINT or SIGTERM from processes.py's handler."""
    codes = (REPO / "docs" / "failures-and-security.md").read_text().split("## Errors and exit codes")[1]
    for code in (0, 1, 2, 128 + signal.SIGINT, 128 + signal.SIGTERM):
        assert f"`{code}`" in codes, code


def test_the_index_names_every_mode():
    row = next(
        line for line in (REPO / "docs" / "index.md").read_text().splitlines() if "(modes-and-techniques.md)" in line
    )
    assert all(mode in row for mode in modes.NAMES), row


def test_the_modes_table_is_the_modes_declarations():
    """Each mode's row says what its declaration does: its cluster's shape, its own flags, whether it
    resumes on another worker count; and every mode has one."""
    text = (REPO / "docs" / "modes-and-techniques.md").read_text()
    rows = {cells[0]: cells for cells in _table_rows(text, "| mode | module | cluster |")}
    assert set(rows) == set(modes.BY_NAME)
    for name, declared in modes.BY_NAME.items():
        _, module, cluster, own_flags, resumes, _ = rows[name]
        assert module == f"`{declared.build.__module__.rsplit('.', 1)[1]}.py`"
        assert ("workers only" in cluster) == bool(declared.workers_alone)
        assert ("a local one per group" in cluster) == declared.groups
        assert ("none" in cluster) == (not declared.cluster)
        assert set(re.findall(r"`--(\w+)`", own_flags)) == set(declared.flags)
        assert resumes == ("yes" if declared.lockstep else "no")


def _table_rows(text, header):
    """The cells of each row of the markdown table that starts with `header`."""
    lines = text.split(header, 1)[1].splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in itertools.takewhile(bool, lines)]


def test_the_readmes_step_times_are_the_benchmark_tables():
    """The README quotes the MLP's 2-worker step times from BENCHMARKS.md's generated main table: the same
    numbers, so a regenerated table cannot leave the README behind."""
    quoted = re.search(
        r"digits MLP, 2 workers: ([\d.]+) ms/step against sync's ([\d.]+) and MultiWorkerMirroredStrategy's ([\d.]+)",
        (REPO / "README.md").read_text(),
    )
    benchmarks = (REPO / "BENCHMARKS.md").read_text()
    generated = benchmarks[benchmarks.index("<!-- bench:begin") : benchmarks.index("<!-- bench:end")]
    mlp = generated[generated.index("### digits MLP") : generated.index("### CIFAR-10")]
    measured = [
        re.search(rf"^\| {re.escape(system)} \| 2 \| ([\d.]+) \|", mlp, re.M).group(1)
        for system in ("all-reduce", "sync, ordered", "MultiWorkerMirroredStrategy (TensorFlow's defaults)")
    ]
    assert list(quoted.groups()) == measured
