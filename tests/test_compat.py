"""The one place TensorFlow is imported (parallel_tf/compat.py)."""

import sys

import pytest

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import portable_kernel


def test_tensorflow_runs_in_graph_mode():
    assert tf.constant(1).dtype == tf.int32 and not tf.executing_eagerly()  # TF1 graph mode


def test_tensorflow_loads_without_keras():
    """TF 2.16 and later load Keras 3 while they import (40% of a task's start-up); compat skips that load.
    Nothing in the suite asks for tf.keras, so it is still absent here. TF 2.15 and earlier bundle Keras 2,
    which their import loads another way: start-up is slower there, nothing else changes."""
    if not tf.VERSION.startswith("2."):
        pytest.skip(f"TensorFlow {tf.VERSION} loads no Keras as it imports")
    import importlib.metadata  # Python 3.8 and later, as every TensorFlow 2 that loads Keras

    if int(importlib.metadata.version("keras").split(".")[0]) < 3:
        pytest.skip(f"Keras {importlib.metadata.version('keras')}: compat skips only Keras 3's eager load")
    tf.constant(1)  # TensorFlow imported
    assert "keras.src.optimizers" not in sys.modules and "keras" not in sys.modules


def test_the_environments_thread_count_wins_over_the_pin_and_a_contradicting_flag_is_refused(monkeypatch):
    """--intra_op_threads unset: the environment's TF_NUM_INTRAOP_THREADS, else 2; set: it, where the
    environment agrees or says nothing."""
    monkeypatch.delenv(compat.INTRA_OP_THREADS, raising=False)
    assert (compat.intra_op_threads(), compat.intra_op_threads(3)) == (compat.PINNED_THREADS, 3)
    monkeypatch.setenv(compat.INTRA_OP_THREADS, "4")
    assert (compat.intra_op_threads(), compat.intra_op_threads(4)) == (4, 4)
    with pytest.raises(ConfigError, match=r"^--intra_op_threads=2 contradicts TF_NUM_INTRAOP_THREADS=4 in the env"):
        compat.intra_op_threads(2)
    monkeypatch.setenv(compat.INTRA_OP_THREADS, "four")
    with pytest.raises(ConfigError, match=r"^TF_NUM_INTRAOP_THREADS='four' in the environment is not a thread count"):
        compat.intra_op_threads()


def test_the_kernels_are_the_flags_and_an_environment_that_says_otherwise_is_refused(monkeypatch):
    """--kernels decides, portable by default; a user's TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL or
    TF_ENABLE_ONEDNN_OPTS must agree with it: oneDNN's ops on beside portable kernels would move every hash."""
    for variable in compat.KERNEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert (compat.kernels(), compat.kernels("fast")) == ("portable", "fast")
    monkeypatch.setenv(compat.CONTRACTION_KERNEL, "true")
    assert compat.kernels("fast") == "fast"
    with pytest.raises(
        ConfigError,
        match=r"^TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL=true in the environment asks for TensorFlow's kernels, and "
        r"the run's are --kernels=portable \(the default\): unset it, or choose --kernels=fast$",
    ):
        compat.kernels()
    monkeypatch.delenv(compat.CONTRACTION_KERNEL)
    monkeypatch.setenv(compat.ONEDNN_OPTS, "false")  # a text other than this process's own pin ("0"): the user's
    with pytest.raises(
        ConfigError, match=r"^TF_ENABLE_ONEDNN_OPTS=false .* portable's kernels, and the run's are --kernels=fast:"
    ):
        compat.kernels("fast")
    monkeypatch.setenv(compat.ONEDNN_OPTS, "yes")
    with pytest.raises(ConfigError, match=r"^TF_ENABLE_ONEDNN_OPTS='yes' in the environment is not true or false"):
        compat.kernels()


def test_a_setting_this_package_made_in_a_parent_process_is_not_the_users(monkeypatch):
    """A process started by one that loaded TensorFlow (this test process, a notebook) inherits the variables
    compat set there, noted in PARALLEL_TF_SET: they are not the user's, so a flag that says otherwise is the
    run's, not a contradiction; a value the user set over them is the user's again."""
    monkeypatch.setenv(compat.SET_BY_PARALLEL_TF, f"{compat.CONTRACTION_KERNEL}=true {compat.ONEDNN_OPTS}=1")
    monkeypatch.setenv(compat.CONTRACTION_KERNEL, "true")  # a parent's (a fast run's): not the user's
    monkeypatch.setenv(compat.ONEDNN_OPTS, "1")
    assert (compat.kernels("portable"), compat.kernels("fast")) == ("portable", "fast")
    monkeypatch.setenv(compat.CONTRACTION_KERNEL, "false")  # the user's own
    with pytest.raises(ConfigError, match="^TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL=false in the environment asks"):
        compat.kernels("fast")


def test_a_run_identity_records_what_can_move_its_kernels_bits(monkeypatch):
    """oneDNN's arithmetic mode can move either kernels' bits; its instruction-set cap only the fast kernels'
    (portable runs end on the same bits under every cap: tests/test_portable_bits.py)."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("ONEDNN_DEFAULT_FPMATH_MODE", "BF16")
    portable, fast = compat.bits_environment("portable"), compat.bits_environment("fast")
    assert portable["ONEDNN_DEFAULT_FPMATH_MODE"] == fast["ONEDNN_DEFAULT_FPMATH_MODE"] == "BF16"
    assert "ONEDNN_MAX_CPU_ISA" not in portable and fast["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_the_portable_kernel_asked_of_the_environment_is_avx2_or_none(monkeypatch):
    """PARALLEL_TF_PORTABLE_KERNEL can ask for the AVX2 kernel (the same bits); any other text is refused in one
    line, before the library loads, as a run's --check_flags makes the check."""
    for allowed in ("avx2", ""):
        monkeypatch.setenv(compat.PORTABLE_KERNEL, allowed)
        portable_kernel.check()
    monkeypatch.setenv(compat.PORTABLE_KERNEL, "avx512")
    with pytest.raises(
        ConfigError, match=r"^PARALLEL_TF_PORTABLE_KERNEL='avx512' in the environment: avx2, or unset for the CPU's"
    ):
        portable_kernel.check()
