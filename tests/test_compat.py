"""The one place TensorFlow is imported (parallel_tf/compat.py)."""

import subprocess
import sys

from conftest import REPO

PROBE = """
import sys
from parallel_tf.compat import tf
assert tf.constant(1).dtype == tf.int32 and not tf.executing_eagerly()  # TF1 graph mode
print("keras" in sys.modules, "keras.src.optimizers" in sys.modules)
"""


def test_tensorflow_loads_in_graph_mode_without_keras():
    """TF 2.x loads Keras while it imports (40% of a task's start-up); compat skips that load."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False False\n"
