"""The same bits on every x86-64 machine with AVX2: the params_sha256 of short runs, recorded in
tests/data/reference_hashes.json with the machine they were recorded on, and asserted on whatever
machine runs this. compat.py caps oneDNN's kernels at AVX2 and --intra_op_threads fixes how Eigen
splits a matrix product (2 threads, whatever the cores), so neither a CPU's AVX-512 nor its core
count changes them. Skipped, saying why, where they cannot hold: another architecture, a CPU without
AVX2, another TensorFlow, or ONEDNN_MAX_CPU_ISA set to something else. After a TensorFlow upgrade,
record them anew from what the failing test prints, with the machine."""

import json
import os
import platform

import pytest
from conftest import REPO
from inprocess import train
from models import CNN, DIGITS, FLAGS, MLP

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import devices

pytestmark = pytest.mark.inprocess

REFERENCE = json.loads((REPO / "tests" / "data" / "reference_hashes.json").read_text())
STRICT = "strict sync, 1, 2 and 4 workers"
RUNS = {  # name: (recipe, mode, flags), each 30 steps of the digits (the CNN 10)
    "one process": (MLP, "single", {}),
    "sync, 2 workers": (MLP, "sync", {"num_workers": 2}),
    **{f"strict sync, {n} workers": (MLP, "sync", {"num_workers": n, "strict_determinism": True}) for n in (1, 2, 4)},
    "allreduce, 2 workers": (MLP, "allreduce", {"num_workers": 2}),
    "CNN, one process": (CNN, "single", {"train_steps": 10}),
}


def _why_not_portable():
    """Why the recorded bits cannot be expected here, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the references are x86-64's; this is {platform.machine()}"
    if "avx2" not in devices.kernel_path()["cpu_extensions"]:
        return "this CPU has no AVX2, the kernels' pinned path"
    if os.environ.get(compat.MAX_CPU_ISA, compat.PINNED_ISA) != compat.PINNED_ISA:
        return f"{compat.MAX_CPU_ISA}={os.environ[compat.MAX_CPU_ISA]} is set, not {compat.PINNED_ISA}"
    if REFERENCE["recorded_on"]["tensorflow"] != tf.VERSION:
        return f"recorded with TensorFlow {REFERENCE['recorded_on']['tensorflow']}, this is {tf.VERSION}"
    return None


def test_short_runs_end_on_the_recorded_bits_on_this_machine(tmp_path):
    why_not = _why_not_portable()
    if why_not:
        pytest.skip(why_not)
    got = {}
    for name, (recipe, mode, flags) in RUNS.items():
        summary = train(recipe, DIGITS, tmp_path / name.replace(" ", "_"), mode, **{**FLAGS, **flags})["summary"]
        assert summary["kernels"]["onednn_max_cpu_isa"] == compat.PINNED_ISA
        got[name] = summary["params_sha256"]
    strict = {got.pop(f"strict sync, {n} workers") for n in (1, 2, 4)}
    got[STRICT] = strict.pop() if len(strict) == 1 else sorted(strict)
    assert got == REFERENCE["params_sha256"], f"recorded on {REFERENCE['recorded_on']}; here: {got}"


def test_another_thread_count_is_refused_once_tensorflow_has_loaded():
    """This process loaded TensorFlow with 2 threads (conftest): 4 would silently not apply."""
    with pytest.raises(ConfigError, match="--intra_op_threads=4: TensorFlow loaded in this process with 2 "):
        compat.pin_intra_op_threads(4)
    compat.pin_intra_op_threads(2)  # the count it has: nothing to refuse
