"""The one place that imports TensorFlow.

Everything else does `from parallel_tf.compat import tf` and gets the TF1 graph-mode API
(`tf.compat.v1` with v2 behaviour disabled), so the package runs the same on TF 1.15 and on
TF 2.x. The one exception is the benchmark's peers, TensorFlow 2's own distribution strategies,
which ask for `tensorflow_v2()`. TF's C++ start-up chatter is hidden unless the user asks for
it, and oneDNN's custom kernels are off by default: their results depend on computation order,
which reproducibility studies must control (set TF_ENABLE_ONEDNN_OPTS=1 to turn them back on).

The import happens on first use of `tf`, not when a module is loaded: a task refused for a bad
flag or spec exits in a fraction of a second instead of after TensorFlow's import (3-6 s).

TF 2.x also loads Keras eagerly while it imports (`keras.src.optimizers`, which pulls in
scikit-learn's wrappers); nothing here uses Keras, so that load is skipped: it was 40% of every
task's start-up (import median 6.2 s with it, 3.8 s without, five interleaved runs on this
machine). `tf.keras` still loads on first use. TF 1.15 has no such load.
"""

import functools
import os
import sys

_KERAS_EAGER_LOAD = "keras.src.optimizers"  # what tensorflow/__init__.py imports, in try/except ImportError


@functools.cache
def _import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    skip_keras = _KERAS_EAGER_LOAD not in sys.modules
    if skip_keras:
        sys.modules[_KERAS_EAGER_LOAD] = None  # makes that import raise ImportError, which TF passes over
    try:
        import tensorflow
    finally:
        if skip_keras:
            del sys.modules[_KERAS_EAGER_LOAD]  # a later import of it (tf.keras) works as usual
    return tensorflow


@functools.cache
def _tensorflow_v1():
    v1 = _import_tensorflow().compat.v1
    v1.get_logger().setLevel("ERROR")
    v1.disable_v2_behavior()
    return v1


def tensorflow_v2():
    """TF 2's own API with its behaviour (eager) back on: only for the benchmark's peers, TensorFlow's
    distribution strategies (tools/tf_strategies.py), which have no TF1 graph-mode form. TF 2 only."""
    tensorflow = _import_tensorflow()
    tensorflow.compat.v1.enable_v2_behavior()
    return tensorflow


class _LazyTensorFlowV1:
    """Stands for tf.compat.v1; the first attribute read imports it."""

    def __getattr__(self, name):
        return getattr(_tensorflow_v1(), name)


tf = _LazyTensorFlowV1()
