"""The one place that imports TensorFlow.

Everything else does `from parallel_tf.compat import tf` and gets the TF1 graph-mode API
(`tf.compat.v1` with v2 behaviour disabled), so the package runs the same on TF 1.15 and on
TF 2.x. The one exception is the benchmark's peers, TensorFlow 2's own distribution strategies,
which ask for `tensorflow_v2()`. TF's C++ start-up chatter is hidden unless the user asks for
it, and oneDNN's custom kernels are off by default: their results depend on computation order,
which reproducibility studies must control (set TF_ENABLE_ONEDNN_OPTS=1 to turn them back on).

The kernel path is pinned too, so a params_sha256 is the same on every x86-64 machine with AVX2:
TensorFlow's CPU MatMul and convolutions go through Eigen's contraction into oneDNN's sgemm even
with TF_ENABLE_ONEDNN_OPTS=0, and oneDNN picks AVX2 or AVX-512 code at run time from the CPU, which
sums in another order. ONEDNN_MAX_CPU_ISA caps that choice at AVX2 (unless the environment sets it):
the default run ended on 0419aeb1... with the cap and f31fc5f1... without it on an AVX-512 EPYC, at
no measurable cost (BENCHMARKS.md). The other half is the intra-op thread count, by which Eigen splits
a contraction's sums: the CNN ended on three hashes at 1, 2 and 4 threads. TensorFlow 2 sizes that pool
once, from TF_NUM_INTRAOP_THREADS, as it loads (a session's ConfigProto comes too late), so it is fixed
here, 2 whatever the cores, and --intra_op_threads sets it before the import (pin_intra_op_threads).

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

from parallel_tf.errors import ConfigError

_KERAS_EAGER_LOAD = "keras.src.optimizers"  # what tensorflow/__init__.py imports, in try/except ImportError
MAX_CPU_ISA = "ONEDNN_MAX_CPU_ISA"
PINNED_ISA = "AVX2"  # what every x86-64 CPU of the last ten years has, so everyone's kernels are the same
INTRA_OP_THREADS = "TF_NUM_INTRAOP_THREADS"
PINNED_THREADS = 2  # --intra_op_threads' default


@functools.cache
def _import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault(MAX_CPU_ISA, PINNED_ISA)
    os.environ.setdefault(INTRA_OP_THREADS, str(PINNED_THREADS))
    skip_keras = _KERAS_EAGER_LOAD not in sys.modules
    if skip_keras:
        sys.modules[_KERAS_EAGER_LOAD] = None  # makes that import raise ImportError, which TF passes over
    try:
        import tensorflow
    finally:
        if skip_keras:
            del sys.modules[_KERAS_EAGER_LOAD]  # a later import of it (tf.keras) works as usual
    return tensorflow


def pin_intra_op_threads(count):
    """Sets the intra-op threads TensorFlow will size its CPU pool with; refused once it has loaded with
    another count (a process that trains several runs, as the tests do), which would silently not apply."""
    loaded = _import_tensorflow.cache_info().currsize
    if loaded and os.environ.get(INTRA_OP_THREADS) != str(count):
        raise ConfigError(
            f"--intra_op_threads={count}: TensorFlow loaded in this process with "
            f"{os.environ.get(INTRA_OP_THREADS)} and sizes its threads once"
        )
    os.environ[INTRA_OP_THREADS] = str(count)


def intra_op_threads():
    """The count TensorFlow sizes its CPU pool with in this process (pinned unless the environment set it)."""
    return int(os.environ.get(INTRA_OP_THREADS, PINNED_THREADS))


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
