"""docs/architecture.md's "Adding a reducer", "Adding a technique" and "Adding a mode" are recipes a contributor
follows: done to a copy of the package, each section's numbered steps, and nothing else, give a piece that
composes, type-checks (mypy on the copy) and trains. On a one-parameter model whose gradient is 1 whatever w is,
3 steps at learning rate 0.5 from w = 0 move w to -3 x 0.5 x 1 = -1.5 where the gradients are applied as they
are, so each made-up piece is one whose effect a reader works out by hand:

- the reducer halves the ring's mean: -3 x 0.5 x 1/2 = -0.75;
- the technique fills the optimizer seam and halves every update's gradients: -0.75 again, by another seam;
- the mode has each of 2 workers train its own copy with nothing crossing (no ps, no collective): the chief's
  copy takes its 3 steps alone, -1.5, summary.json names the mode, and its step sends 0 bytes (sync's sends the
  gradient and pulls w).
"""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
from conftest import REPO

pytestmark = pytest.mark.inprocess
TIMEOUT = 300
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()

HALVED_REDUCER = '''\
"""A made-up reducer (tests/test_adding.py): the ring's mean, halved."""

from parallel_tf.graph.collectives import Reducing, Reduction
from parallel_tf.training.declarations import Flags, Technique, flag


class Halved(Reducing):
    def __init__(self, ring):
        self.ring = ring

    def reduce(self, gradients) -> Reduction:
        means, losses = self.ring.means(gradients.whole, riding=self.ring.loss_slots(gradients.loss))
        return Reduction([mean / 2.0 for mean in means], losses)


def reduce(settings, ring, variables):
    return [Halved(ring)]


class Options(Flags):
    halved: bool = flag(False, "allreduce: the ring's mean, halved.")


TECHNIQUE = Technique(name="halved", modes=("allreduce",), options=Options, hooks=("reduce",))
'''

HALVED_UPDATES = '''\
"""A made-up technique (tests/test_adding.py): every update's gradients halved before the optimizer applies them."""

from parallel_tf.graph.optimizers import DelegatingOptimizer
from parallel_tf.training.declarations import Flags, Technique, flag


class Halving(DelegatingOptimizer):
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        halved = [(gradient / 2.0, variable) for gradient, variable in grads_and_vars]
        return super().apply_gradients(halved, global_step, name)


def optimizer(settings, optimizer):
    return Halving(optimizer)


class Options(Flags):
    halved_updates: bool = flag(False, "allreduce: every update's gradients halved.")


TECHNIQUE = Technique(name="halved_updates", modes=("allreduce",), options=Options, hooks=("optimizer",))
'''

ALONE = '''\
"""A made-up mode (tests/test_adding.py): every worker trains its own copy on its shard; nothing crosses."""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.model import StepReads, build_model
from parallel_tf.graph.optimizers import scheduled
from parallel_tf.graph.placement import worker_device
from parallel_tf.training.declarations import Mode
from parallel_tf.training.train_graph import Phase, StepReport, TrainGraph, drive


def build(recipe, dataset, settings):
    with tf.device(worker_device(settings.task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        variables = tf.trainable_variables()
        optimizer = scheduled(settings.optimizer, settings.schedule, global_step)

        def step(on_step):
            gradients = tf.gradients(on_step.loss, on_step.reads.of(variables))
            with tf.control_dependencies(gradients):
                train_op = optimizer.apply_gradients(zip_strict(gradients, variables), global_step)
            with tf.control_dependencies([train_op]):
                return StepReport(workers=tf.constant([settings.task_index]), losses=tf.reshape(on_step.loss, [1]))

        steps = drive(settings, recipe, model, [Phase(0, step)], StepReads)
        initialise = tf.variables_initializer(tf.global_variables())  # the chief's are restored or initialised
    return TrainGraph(
        model=model,
        position=global_step,
        steps=steps,
        chief_waits_for_all=False,  # its wait is a queue on a ps, and there is none
        initialise_on_join=None if settings.task_index == 0 else lambda sess: sess.run(initialise),
    )


MODE = Mode(name="alone", build=build, workers_alone="train their own copies, apart")
'''


def _as_technique(name, seam, seam_type):
    """Steps 2 to 4 of adding a technique (or a reducer): the module in TECHNIQUES, its hook's binding, its Options."""

    def follow(package):
        techniques = package / "training" / "techniques" / "__init__.py"
        _write_after(techniques, "from parallel_tf.training.techniques import (\n", f"    {name},\n")
        _write_after(techniques, "TECHNIQUES = (\n", f"    {name},\n")
        bindings = package / "training" / "hook_types.py"
        _write_after(bindings, "from parallel_tf.training.techniques import (\n", f"    {name},\n")
        bindings.write_text(bindings.read_text() + f"{name}_{seam}: seams.{seam_type} = {name}\n")
        run_options = package / "training" / "run_options.py"
        _write_after(run_options, "class Options(\n", f"    techniques.{name}.Options,\n")

    return follow


def _as_mode(package):
    """Step 2 of adding a mode: the module in CLUSTER_MODES (and its import)."""
    modes = package / "training" / "modes" / "__init__.py"
    _write_after(modes, "from parallel_tf.training.modes import ", "alone, ")
    _write_after(modes, "CLUSTER_MODES = (sync, asynchronous, hierarchical, allreduce", ", alone")


@dataclass(frozen=True)
class Addition:
    section: str  # its heading in docs/architecture.md
    module: str  # the new module's name, in the folder the section's first step names
    source: str
    follow: object  # the section's other steps, done to a copy of the package
    train: str  # inprocess.train's arguments
    expected: dict  # w after the 3 steps, by hand (the module's docstring), and what summary.json says


ADDITIONS = {
    "reducer": Addition(
        "Adding a reducer",
        "halved",
        HALVED_REDUCER,
        _as_technique("halved", "reduce", "Reduce"),
        'mode="allreduce", halved=True',
        {"w": -0.75, "mode": "allreduce"},
    ),
    "technique": Addition(
        "Adding a technique",
        "halved_updates",
        HALVED_UPDATES,
        _as_technique("halved_updates", "optimizer", "Optimizer"),
        'mode="allreduce", halved_updates=True',
        {"w": -0.75, "mode": "allreduce"},
    ),
    "mode": Addition(
        "Adding a mode",
        "alone",
        ALONE,
        _as_mode,
        'mode="alone", num_ps=0',
        {"w": -1.5, "mode": "alone", "bytes_sent_per_step": 0},
    ),
}

TRAIN = """\
import json, sys
sys.path[:0] = [{copy!r}, {tests!r}]
from pathlib import Path
from inprocess import scalar_dataset, scalar_recipe, slope, train
out = train(scalar_recipe(slope, 0.0), scalar_dataset(1.0, 2.0), Path({logdir!r}), train_steps=3, learning_rate=0.5,
            {arguments})
print(json.dumps({{**out["summary"], "w": float(out["params"]["model/w:0"][0])}}))
"""


def _steps(section):
    """The path each numbered step of `section` touches: its first backquoted parallel_tf path (a folder: a new
    module there)."""
    text = ARCHITECTURE.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"^\d+\. ", text, flags=re.MULTILINE)[1:]
    return [re.search(r"`(parallel_tf/[\w/.]*)`", item).group(1) for item in items]


def _write_after(path, anchor, text):
    source = path.read_text()
    assert source.count(anchor) == 1, f"{path}: {anchor!r}"
    path.write_text(source.replace(anchor, anchor + text))


def _changed(copy):
    """The package's files the copy adds or changes, relative to the repository."""
    ours = {path.relative_to(copy) for path in copy.rglob("parallel_tf/**/*.py")}
    return sorted(
        str(path)
        for path in ours
        if not (REPO / path).exists() or (REPO / path).read_bytes() != (copy / path).read_bytes()
    )


@pytest.mark.parametrize("kind", ADDITIONS)
def test_a_sections_steps_alone_add_a_piece_that_type_checks_and_trains(kind, tmp_path):
    pytest.importorskip("mypy", reason="the type checker is in the dev extra (./run_tests.sh installs it)")
    addition = ADDITIONS[kind]
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "parallel_tf", copy / "parallel_tf", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy)
    folder, *files = _steps(addition.section)
    (copy / folder / f"{addition.module}.py").write_text(addition.source)
    addition.follow(copy / "parallel_tf")
    assert _changed(copy) == sorted([f"{folder}{addition.module}.py", *files])

    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir=/dev/null", "parallel_tf"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=copy,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    script = TRAIN.format(
        copy=str(copy), tests=str(REPO / "tests"), logdir=str(tmp_path / "run"), arguments=addition.train
    )
    trained = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=TIMEOUT, cwd=copy
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    outcome = json.loads(trained.stdout.splitlines()[-1])
    assert {name: outcome[name] for name in addition.expected} == addition.expected, trained.stdout
