"""The same bits on every x86-64 machine: the params_sha256 of the runs in tests/portable_runs.py, recorded
in tests/data/reference_hashes.json with the machines and emulated CPU models they were checked on, and
asserted here on whatever machine runs this, under every ONEDNN_MAX_CPU_ISA cap it takes, and under QEMU's
models of an AMD and an Intel CPU, whose cache sizes differ from each other and from this machine's
(graph/products.py says why those matter). A machine where they differ fails: that is where the promise
matters. Skipped, saying why, only outside the promise: another architecture, a CPU without AVX2, another
TensorFlow. After a TensorFlow upgrade, record them anew from what the failing test prints."""

import json
import os
import platform
import re
import shutil
import sys

import pytest
from conftest import REPO
from portable_runs import CLUSTERS, EMULATED, PROBES, PRODUCTS, hash_of_probes, hash_of_products, train_all

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

REFERENCE = json.loads((REPO / "tests" / "data" / "reference_hashes.json").read_text())
ISA_CAPS = ("ALL", "AVX2", "AVX", "SSE41")  # oneDNN's names, from the newest instruction set down
EMULATED_CPUS = ("EPYC-Rome-v1", "Haswell-v1")  # L1d/L2 32 KB/512 KB and 32 KB/4 MB, as qemu 7.2 reports them
RUNS_SCRIPT = str(REPO / "tests" / "portable_runs.py")
RUN_TIMEOUT = 240  # an emulated process: about 20 s here, TensorFlow's import most of it


def _why_not_portable():
    """Why the recorded bits cannot be expected here, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the references are x86-64's; this is {platform.machine()}"
    if "avx2" not in compat.cpu()["cpu_extensions"]:
        return "this CPU has no AVX2, below every machine the promise covers"
    if tf.VERSION not in REFERENCE["recorded_on"]["tensorflow"]:
        return f"recorded with TensorFlow {' and '.join(REFERENCE['recorded_on']['tensorflow'])}, this is {tf.VERSION}"
    return None


@pytest.fixture
def portable_here():
    why_not = _why_not_portable()
    if why_not:
        pytest.skip(why_not)


def _recorded(names):
    return {name: REFERENCE["sha256"][name] for name in names}


def _printed_hashes(run):
    """The ({name: params_sha256}, {probe: its hash}) a run of tests/portable_runs.py printed last (qemu's warnings
    come first)."""
    printed = json.loads([line for line in run.lines if line.startswith("{")][-1])
    return printed, {probe: printed.pop(probe) for probe in PROBES if probe in printed}


@pytest.mark.inprocess
def test_runs_end_on_the_recorded_bits_on_this_machine(tmp_path, portable_here):
    summaries = train_all({**CLUSTERS, **EMULATED}, tmp_path)
    assert {s["kernels"]["bits"] for s in summaries.values()} == {"portable"}
    wide = "avx512f" in compat.cpu()["cpu_extensions"] and os.environ.get(compat.PORTABLE_KERNEL) != "avx2"
    assert {s["kernels"]["portable_kernel"] for s in summaries.values()} == {"avx512f" if wide else "avx2"}
    got = {**{name: summary["params_sha256"] for name, summary in summaries.items()}, PRODUCTS: hash_of_products()}
    assert got == _recorded(got), f"checked on {REFERENCE['checked_on']}; here ({platform.processor()}): {got}"
    # the global norm stays under 1 over these steps, so clipping at 1 scales by 1 / 1 = 1 exactly: the plain bits
    assert got["clipped at 1, sync, 2 workers"] == got["sync, 2 workers"]


@pytest.mark.cluster
def test_the_default_run_ends_on_the_readmes_hash_under_every_isa_cap(procs, portable_here):
    """Four processes, one per cap (TensorFlow reads it once, as it loads), two at a time on two cores."""
    readme_hash = re.search(r"the `params_sha256` is the same, `([0-9a-f]{8})\.\.\.`", (REPO / "README.md").read_text())
    assert REFERENCE["sha256"]["default run"].startswith(readme_hash.group(1))
    expected = _recorded(["default run", *EMULATED, PRODUCTS])
    for pair in (ISA_CAPS[:2], ISA_CAPS[2:]):
        runs = {
            cap: procs.start([sys.executable, RUNS_SCRIPT, "default", "emulated"], {"ONEDNN_MAX_CPU_ISA": cap})
            for cap in pair
        }
        for cap, run in runs.items():
            assert run.wait(RUN_TIMEOUT) == 0, run.output
            assert _printed_hashes(run)[0] == expected, f"ONEDNN_MAX_CPU_ISA={cap}"


@pytest.mark.cluster
def test_the_thread_count_moves_no_bit(procs, portable_here):
    """Two processes, at 1 and 3 intra-op threads (TensorFlow sizes its pool once, as it loads; this one has 2): every
    recorded run ends on the same bits, the CIFAR-10 CNN's included, whose conv1 bias gradient TensorFlow's
    BiasAddGrad would cut by the thread count (graph/layers.py's add_bias sums it in order)."""
    runs = {
        threads: procs.start([sys.executable, RUNS_SCRIPT, "emulated", "clusters"], {compat.INTRA_OP_THREADS: threads})
        for threads in ("1", "3")
    }
    for threads, run in runs.items():
        assert run.wait(RUN_TIMEOUT) == 0, run.output
        assert _printed_hashes(run)[0] == _recorded([*EMULATED, *CLUSTERS, PRODUCTS]), f"{threads} threads"


@pytest.mark.cluster
def test_short_runs_end_on_the_native_bits_on_emulated_amd_and_intel_cpus(procs, portable_here):
    qemu = shutil.which("qemu-x86_64")
    if not qemu:
        pytest.skip("qemu-x86_64 is not installed (as root: apt-get install qemu-user; .ci/run does)")
    """Every optimizer's update among the runs; and each approximate instruction the portable allow-list leaves out,
    probed in TensorFlow's own op, differs under QEMU from this CPU: so a hole of that kind in a portable run would
    show here as native != emulated."""
    runs = {cpu: procs.start([qemu, "-cpu", cpu, sys.executable, RUNS_SCRIPT, "emulated"]) for cpu in EMULATED_CPUS}
    native_probes = hash_of_probes()
    for cpu, run in runs.items():
        assert run.wait(RUN_TIMEOUT) == 0, run.output
        hashes, probes = _printed_hashes(run)
        assert hashes == _recorded([*EMULATED, PRODUCTS]), f"qemu-x86_64 -cpu {cpu}"
        assert [probe for probe in PROBES if probes[probe] == native_probes[probe]] == [], f"qemu-x86_64 -cpu {cpu}"


@pytest.mark.cluster
def test_the_avx512_kernel_adds_the_avx2_kernels_sums(procs, portable_here):
    """Two processes, as the library chooses its kernel once, as it loads: on a CPU with AVX-512F the default and
    PARALLEL_TF_PORTABLE_KERNEL=avx2 run different kernels, and their products agree to the bit at the shapes
    around every block of both (the recipes' runs are held to the recorded hashes by the tests above)."""
    if "avx512f" not in compat.cpu()["cpu_extensions"]:
        pytest.skip("this CPU has no AVX-512F: it runs the AVX2 kernel alone")
    runs = {
        asked: procs.start([sys.executable, RUNS_SCRIPT, "kernel"], {compat.PORTABLE_KERNEL: asked})
        for asked in ("", "avx2")
    }
    printed = {}
    for asked, run in runs.items():
        assert run.wait(RUN_TIMEOUT) == 0, run.output
        printed[asked] = json.loads([line for line in run.lines if line.startswith("{")][-1])
    assert (printed[""]["kernel"], printed["avx2"]["kernel"]) == ("avx512f", "avx2")
    assert printed[""]["products"] == printed["avx2"]["products"]


def test_another_thread_count_is_refused_once_tensorflow_has_loaded():
    """This process loaded TensorFlow with 2 threads (conftest): 4 would silently not apply."""
    with pytest.raises(ConfigError, match="^--intra_op_threads=4: TensorFlow loaded in this process with TF_NUM_IN"):
        compat.pin_before_loading(intra_op_threads=4)
    with pytest.raises(ConfigError, match="^--kernels=fast: TensorFlow loaded in this process with TENSORFLOW_USE_"):
        compat.pin_before_loading(kernels="fast")
    compat.pin_before_loading(2, "portable")  # what it has: nothing to refuse
    compat.pin_before_loading()
