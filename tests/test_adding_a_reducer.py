"""docs/architecture.md's "Adding a reducer" is a recipe a contributor follows: done to a copy of the package, its
numbered steps, and nothing else, give a reducer that composes, type-checks and trains. The made-up reducer halves
the ring's mean: on a one-parameter model whose gradient is 1 whatever w is, 3 steps at learning rate 0.5 from
w = 0 move w to -3 x 0.5 x 1/2 = -0.75 (the plain ring's -1.5 is what it would be if the hook were never called)."""

import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

pytestmark = pytest.mark.inprocess
TIMEOUT = 300
SECTION = (REPO / "docs" / "architecture.md").read_text().split("## Adding a reducer", 1)[1].split("\n## ", 1)[0]

HALVED = '''\
"""A made-up reducer (tests/test_adding_a_reducer.py): the ring's mean, halved."""

from parallel_tf.graph.collectives import Reducing, Reduction
from parallel_tf.training.declarations import Flags, Technique, flag


class Halved(Reducing):
    def __init__(self, ring, variables):
        self.ring, self.buckets = ring, ring.count_buckets(variables)

    def reduce(self, gradients) -> Reduction:
        means, losses = self.ring.means(gradients.whole, riding=self.ring.loss_slots(gradients.loss))
        return Reduction([mean / 2.0 for mean in means], losses)


def reduce(settings, ring, variables):
    return [Halved(ring, variables)]


class Options(Flags):
    halved: bool = flag(False, "allreduce: the ring's mean, halved.")


TECHNIQUE = Technique(name="halved", modes=("allreduce",), options=Options, hooks=("reduce",))
'''

TRAIN = """\
import sys
sys.path[:0] = [{copy!r}, {tests!r}]
from pathlib import Path
from inprocess import scalar_dataset, scalar_recipe, slope, train
out = train(scalar_recipe(slope, 0.0), scalar_dataset(1.0, 2.0), Path({logdir!r}), mode="allreduce",
            train_steps=3, learning_rate=0.5, halved=True)
print("w =", float(out["params"]["model/w:0"][0]))
"""


def _steps():
    """{the path each numbered step touches: its first backquoted parallel_tf path (a folder: a new module there)}."""
    items = re.split(r"^\d+\. ", SECTION, flags=re.MULTILINE)[1:]
    return [re.search(r"`(parallel_tf/[\w/.]*)`", item).group(1) for item in items]


def _follow(package):
    """Steps 2 to 4 of the section, each one line where the section says (and its import), to `package`."""
    techniques = package / "training" / "techniques" / "__init__.py"
    _write_after(techniques, "from parallel_tf.training.techniques import (\n", "    halved,\n")
    _write_after(techniques, "TECHNIQUES = (\n", "    halved,\n")
    bindings = package / "training" / "hook_types.py"
    _write_after(bindings, "from parallel_tf.training.techniques import (\n", "    halved,\n")
    bindings.write_text(bindings.read_text() + "halved_reduce: seams.Reduce = halved\n")
    run_options = package / "training" / "run_options.py"
    _write_after(run_options, "class Options(\n", "    techniques.halved.Options,\n")


def _write_after(path, anchor, line):
    source = path.read_text()
    assert source.count(anchor) == 1, f"{path}: {anchor!r}"
    path.write_text(source.replace(anchor, anchor + line))


def _changed(copy):
    """The package's files the copy adds or changes, relative to the repository."""
    ours = {path.relative_to(copy) for path in copy.rglob("parallel_tf/**/*.py")}
    return sorted(
        str(path)
        for path in ours
        if not (REPO / path).exists() or (REPO / path).read_bytes() != (copy / path).read_bytes()
    )


def test_the_sections_steps_alone_add_a_reducer_that_type_checks_and_trains(tmp_path):
    pytest.importorskip("mypy", reason="the type checker is in the dev extra (./run_tests.sh installs it)")
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "parallel_tf", copy / "parallel_tf", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy)
    folder, *lines = _steps()
    assert folder == "parallel_tf/training/techniques/", folder
    (copy / folder / "halved.py").write_text(HALVED)
    _follow(copy / "parallel_tf")
    assert _changed(copy) == sorted([f"{folder}halved.py", *lines])

    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir=/dev/null", "parallel_tf"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=copy,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    script = TRAIN.format(copy=str(copy), tests=str(REPO / "tests"), logdir=str(tmp_path / "run"))
    trained = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=TIMEOUT, cwd=copy
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert trained.stdout.splitlines()[-1] == "w = -0.75", trained.stdout
