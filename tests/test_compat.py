"""The one place TensorFlow is imported (parallel_tf/compat.py)."""

import importlib.metadata
import sys

import pytest

from parallel_tf.compat import tf


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
