"""The one place TensorFlow is imported (parallel_tf/compat.py)."""

import sys

from parallel_tf.compat import tf


def test_tensorflow_loads_in_graph_mode_without_keras():
    """TF 2.x loads Keras while it imports (40% of a task's start-up); compat skips that load. Nothing in the
    suite asks for tf.keras, so it is still absent here."""
    assert tf.constant(1).dtype == tf.int32 and not tf.executing_eagerly()  # TF1 graph mode
    assert "keras.src.optimizers" not in sys.modules and "keras" not in sys.modules
