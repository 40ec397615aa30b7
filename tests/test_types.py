"""The type checker of ./run_tests.sh (mypy, pyproject.toml's [tool.mypy]) holds a codec to graph/codecs.py's Codec
Protocol and a technique's module to the Protocols of the seams it fills (training/seams.py, bound in
training/hook_types.py): a copy of the package whose top-k codec lacks payload_bytes, whose stragglers' module lacks
its wrap, whose clipping's hooks object (a seams.OfOneGraph) lacks its, or whose PowerSGD's way of reducing (a
collectives.Reducing) lacks its reduce, fails it, naming what is short, where the package as it is passes; and it
reads a run's options by their declared types."""

import shutil
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.inprocess
TIMEOUT = 300


def _mypy(package_root):
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir=/dev/null", "parallel_tf"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=package_root,
    )


def _copy(tmp_path):
    pytest.importorskip("mypy", reason="the type checker is in the dev extra (./run_tests.sh installs it)")
    shutil.copytree(
        REPO / "parallel_tf", tmp_path / "parallel_tf", ignore=shutil.ignore_patterns("build", "__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path)


def test_a_codec_short_of_a_protocol_method_fails_the_type_checker(tmp_path):
    _copy(tmp_path)
    assert _mypy(tmp_path).returncode == 0
    codecs = tmp_path / "parallel_tf" / "graph" / "codecs.py"
    source = codecs.read_text()
    top_k = source.index("class TopK")
    method = source.index("    def payload_bytes(self, size):", top_k)
    end = source.index("\n\n", method)
    codecs.write_text(source[:method] + source[end + 1 :])
    checked = _mypy(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert '"tuple[type[TopK], tuple[Argument]]"; expected "str": "tuple[type[Codec]' in checked.stdout


@pytest.mark.parametrize(
    "technique, hook, short",
    [
        ("stragglers", "\ndef wrap(settings, graph):", "Module"),
        ("clipping", "\n    def wrap(self, settings, graph):", '"Clipping"'),
    ],
)
def test_a_technique_short_of_a_hook_it_declares_fails_the_type_checker(tmp_path, technique, hook, short):
    _copy(tmp_path)
    module = tmp_path / "parallel_tf" / "training" / "techniques" / f"{technique}.py"
    source = module.read_text()
    assert source.count(hook) == 1
    module.write_text(source.replace(hook, hook.replace("wrap", "wrapped")))
    checked = _mypy(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "hook_types.py" in checked.stdout
        and f'(expression has type {short}, variable has type "Wrap")' in checked.stdout
    )


def test_the_type_checker_sees_a_runs_options_by_their_declarations_types(tmp_path):
    """settings.options is run_options.Options, whose bases are the declarations' typed Options: mypy reads
    settings.options.powersgd_rank as powersgd's int, and a misspelt flag as no field at all."""
    _copy(tmp_path)
    reads = tmp_path / "parallel_tf" / "training" / "reads_options.py"
    reads.write_text(
        "from parallel_tf.training.settings import Settings\n\n\n"
        "def rank(settings: Settings) -> int:\n"
        "    reveal_type(settings.options.powersgd_rank)\n"
        "    return settings.options.powersgd_rnak\n"
    )
    checked = _mypy(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'reads_options.py:5: note: Revealed type is "int"' in checked.stdout, checked.stdout
    typo = 'reads_options.py:6: error: "Options" has no attribute "powersgd_rnak"; maybe "powersgd_rank"?'
    assert typo in checked.stdout, checked.stdout


@pytest.mark.parametrize(
    "module, call, shorter, wanted",
    [
        (
            "training/modes/allreduce/__init__.py",
            "reducers[0].reduce(settings, ring, variables)",
            "reducers[0].reduce(settings, ring)",
            '"variables" in call to "reduce" of "Reduce"',
        ),
        (
            "training/trainer.py",
            "technique.wrap(settings, graph)",
            "technique.wrap(settings)",
            '"graph" in call to "wrap" of "Wrap"',
        ),
        (
            "training/modes/allreduce/__init__.py",
            "technique.optimizer(settings, optimizer)",
            "technique.optimizer(settings)",
            '"optimizer" in call to "optimizer" of "Optimizer"',
        ),
        (
            "training/modes/allreduce/__init__.py",
            "reducing.reduce(StepGradients(passes, model.loss))",
            "reducing.reduce()",
            '"gradients" in call to "reduce" of "Reducing"',
        ),
    ],
    ids=["all-reduce's reduce hook", "the trainer's wrap", "all-reduce's optimizer hook", "the way of reducing"],
)
def test_a_step_s_call_of_a_hook_is_checked_against_its_seam_s_interface(tmp_path, module, call, shorter, wanted):
    """A step calls its seams' hooks on what settings.hooks holds, typed by the seams' Protocols, and all-reduce's
    ways of reducing as collectives.Reducing; mypy checks those calls (every body, by pyproject.toml's
    check_untyped_defs): a call short of its last argument fails it, naming the interface."""
    _copy(tmp_path)
    path = tmp_path / "parallel_tf" / module
    source = path.read_text()
    assert source.count(call) == 1
    path.write_text(source.replace(call, shorter))
    checked = _mypy(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"error: Missing positional argument {wanted}" in checked.stdout, checked.stdout


def test_a_way_of_reducing_short_of_its_reduce_fails_the_type_checker(tmp_path):
    """All-reduce's step calls reducing.reduce(...) on a collectives.Reducing, whose reduce is abstract: a subclass
    without one cannot be made, and mypy says so where the hook makes it."""
    _copy(tmp_path)
    module = tmp_path / "parallel_tf" / "training" / "techniques" / "powersgd.py"
    source = module.read_text()
    method = "\n    def reduce(self, gradients) -> Reduction:"
    assert source.count(method) == 1
    module.write_text(source.replace(method, method.replace("reduce", "reduced")))
    checked = _mypy(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    wanted = 'error: Cannot instantiate abstract class "Factored" with abstract attribute "reduce"'
    assert wanted in checked.stdout, checked.stdout
