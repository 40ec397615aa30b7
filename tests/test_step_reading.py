"""A step reads in few places (issues 57 and 80): the modules docs/architecture.md lists for one all-reduce step
with PowerSGD and one sync step on 4 servers are those a reader opens following the step's build, traced; no mode
module is over 150 lines, no module of the package over 300 and no function over 60; no mode names --steps_per_run."""

import ast
import re
import sys
from pathlib import Path

import pytest
from inprocess import worker_settings
from models import DIGITS, FLAGS, MLP

from parallel_tf.backports import removeprefix, zip_strict
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.training import modes
from parallel_tf.training.trainer import build_graph

pytestmark = pytest.mark.inprocess

PACKAGE = Path(modes.__file__).parents[2]
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
CASES = {  # the docs' heading: (mode, parameter servers, flags)
    "All-reduce with PowerSGD": ("allreduce", 0, {"powersgd_rank": 1}),
    "Sync on 4 parameter servers": ("sync", 4, {}),
}


def _modules_a_step_reads(mode, num_ps, flags):
    """The trainer, which runs the step (TrainGraph.runs and the driver's Steps, train_graph.py), and every
    package module a function of which runs while trainer.build_graph builds worker 0's step: issue 80's count,
    as a reader opens them, Settings and what it calls, the model's layers and kernels, compat and the data's
    sharding included (the recipe is not the package's)."""
    workers = [f"127.0.0.1:{port}" for port in (1, 2)]
    servers = {"ps": [f"127.0.0.1:{3 + i}" for i in range(num_ps)]} if num_ps else {}
    cluster = cluster_lib.parse({"cluster": {**servers, "worker": workers}}, "test")
    fields = {**FLAGS, "global_batch_size": 120, "collective_group": 1, **flags}
    settings = worker_settings(mode, cluster, 0, None, fields)
    read = {"training/trainer.py"}

    def profile(frame, event, _):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(f"{PACKAGE}/"):
            read.add(removeprefix(path, f"{PACKAGE}/"))

    with tf.Graph().as_default():
        sys.setprofile(profile)
        try:
            build_graph(MLP, DIGITS, settings)
        finally:
            sys.setprofile(None)
    return read


def _documented():
    """{case heading: the modules its list names} of docs/architecture.md's "Reading one step"."""
    section = ARCHITECTURE.read_text().split("## Reading one step", 1)[1].split("\n## ", 1)[0]
    cases = re.split(r"^\*\*(.+?)\*\*", section, flags=re.MULTILINE)[1:]
    return {
        heading: re.findall(r"^\d+\. `parallel_tf/([\w/]+\.py)`", text, re.MULTILINE)
        for heading, text in zip_strict(cases[::2], cases[1::2])
    }


@pytest.mark.parametrize("heading", CASES)
def test_a_step_reads_in_the_modules_the_docs_list(heading):
    listed = _documented()[heading]
    assert len(listed) == len(set(listed)), listed
    assert f"{len(listed)} modules" in ARCHITECTURE.read_text().split(f"**{heading}**", 1)[1].split("\n", 1)[0]
    assert set(listed) == _modules_a_step_reads(*CASES[heading])


def test_no_mode_names_the_steps_a_run():
    """A mode says how one step is built; how many run in one session run is the driver's, read from the run's
    settings (train_graph.drive), so no mode module branches on k or passes it on."""
    named = [path.name for path in Path(modes.__file__).parent.rglob("*.py") if "steps_per_run" in path.read_text()]
    assert not named, named


@pytest.mark.skipif(sys.version_info < (3, 8), reason="ast gives a function's last line from Python 3.8 on")
def test_a_step_reads_in_short_pieces():
    """The sizes issues 57 and 80 set: no mode module over 150 lines, no module of the package over 300, and no
    function of the package over 60."""
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long_modes = {name: n for name, n in sizes.items() if "/modes/" in name and n > 150}
    long_modules = {name: n for name, n in sizes.items() if n > 300}
    long_functions = {
        f"{path.relative_to(PACKAGE)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60
    }
    assert not long_modes and not long_modules and not long_functions, (long_modes, long_modules, long_functions)
