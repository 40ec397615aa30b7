"""The one place TensorFlow is imported (parallel_tf/compat.py)."""

import importlib.metadata
import sys

import pytest

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError


def test_tensorflow_runs_in_graph_mode():
    assert tf.constant(1).dtype == tf.int32 and not tf.executing_eagerly()  # TF1 graph mode


def test_tensorflow_loads_without_keras():
    """TF 2.16 and later load Keras 3 while they import (40% of a task's start-up); compat skips that load.
    Nothing in the suite asks for tf.keras, so it is still absent here. TF 2.15 and earlier bundle Keras 2,
    which their import loads another way: start-up is slower there, nothing else changes."""
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


def test_the_environments_contraction_kernel_decides_the_kernels_unless_a_flag_contradicts_it(monkeypatch):
    monkeypatch.delenv(compat.CONTRACTION_KERNEL, raising=False)
    assert (compat.kernels(), compat.kernels("fast")) == ("portable", "fast")
    monkeypatch.setenv(compat.CONTRACTION_KERNEL, "true")
    assert (compat.kernels(), compat.kernels("fast")) == ("fast", "fast")
    with pytest.raises(ConfigError, match="^--kernels=portable contradicts TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL="):
        compat.kernels("portable")
