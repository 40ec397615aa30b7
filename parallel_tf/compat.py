"""The one place that imports TensorFlow.

Everything else does `from parallel_tf.compat import tf` and gets the TF1 graph-mode API
(`tf.compat.v1` with v2 behaviour disabled), so the package runs the same on TF 1.15 and on
TF 2.x. The one exception is the benchmark's peers, TensorFlow 2's own distribution strategies,
which ask for `tensorflow_v2()`. TF's C++ start-up chatter is hidden unless the user asks for
it, and oneDNN's custom kernels are off by default: their results depend on computation order,
which reproducibility studies must control (set TF_ENABLE_ONEDNN_OPTS=1 to turn them back on).

The kernels are pinned too, so a params_sha256 is the same on every x86-64 machine: TensorFlow's CPU
MatMul and convolutions go through Eigen's contraction into oneDNN's sgemm even with
TF_ENABLE_ONEDNN_OPTS=0, and oneDNN picks its code by the CPU's vendor and instruction set, which sums
in another order (the default run ended on 0419aeb1... on an AMD EPYC and on f31fc5f1... on an Intel
Xeon, both capped at AVX2). TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL=false (--kernels=portable) keeps
those products in Eigen's own kernel, whose one machine-dependent choice, how long a run of terms it
sums in one go, graph/products.py takes away. The other half is the intra-op thread count, by which
Eigen splits some sums: TensorFlow 2 sizes its pool once, from TF_NUM_INTRAOP_THREADS, as it loads (a
session's ConfigProto comes too late), so it is fixed here, 2 whatever the cores. Both are run flags
(--kernels, --intra_op_threads) that pin_before_loading sets before the import; as for every variable
set here, the environment wins over the pins, and a flag that contradicts it is refused. summary.json's
`kernels` records what the run had.

The import happens on first use of `tf`, not when a module is loaded: a task refused for a bad
flag or spec exits in a fraction of a second instead of after TensorFlow's import (3-6 s).

TF 2.x also loads Keras eagerly while it imports (`keras.src.optimizers`, which pulls in
scikit-learn's wrappers); nothing here uses Keras, so that load is skipped: it was 40% of every
task's start-up (import median 6.2 s with it, 3.8 s without, five interleaved runs on this
machine). `tf.keras` still loads on first use. TF 1.15 has no such load.
"""

import dataclasses
import functools
import os
import sys

from parallel_tf.errors import ConfigError

_KERAS_EAGER_LOAD = "keras.src.optimizers"  # what tensorflow/__init__.py imports, in try/except ImportError
ONEDNN_OPTS = "TF_ENABLE_ONEDNN_OPTS"
CONTRACTION_KERNEL = "TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL"  # read by TensorFlow's Eigen contraction
KERNELS = ("portable", "fast")  # --kernels: Eigen's own kernel (false above), or oneDNN's sgemm (true)
INTRA_OP_THREADS = "TF_NUM_INTRAOP_THREADS"
PINNED_THREADS = 2  # where neither --intra_op_threads nor the environment sets a count


@functools.cache
def _import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault(ONEDNN_OPTS, "0")
    for setting in _LOAD_SETTINGS.values():  # where no run flag pinned them (the tools, a test process)
        os.environ.setdefault(setting.variable, setting.encode(setting.default))
    skip_keras = _KERAS_EAGER_LOAD not in sys.modules
    if skip_keras:
        sys.modules[_KERAS_EAGER_LOAD] = None  # makes that import raise ImportError, which TF passes over
    try:
        import tensorflow
    finally:
        if skip_keras:
            del sys.modules[_KERAS_EAGER_LOAD]  # a later import of it (tf.keras) works as usual
    return tensorflow


def intra_op_threads(requested=None):
    """The intra-op threads a run gets: `requested` (--intra_op_threads) or the environment's
    TF_NUM_INTRAOP_THREADS, which must agree where both are set, else PINNED_THREADS."""
    return _LOAD_SETTINGS["intra_op_threads"].value(requested)


def kernels(requested=None):
    """The kernels a run's products run in, "portable" or "fast": `requested` (--kernels) or what the
    environment's TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL says, which must agree where both are set,
    else "portable"."""
    return _LOAD_SETTINGS["kernels"].value(requested)


def pin_before_loading(intra_op_threads=None, kernels=None):
    """Sets what TensorFlow reads from the environment as it loads, from the run's flags (None: unset);
    refused once it has loaded with something else (a process that trains several runs, as the tests do),
    which would silently not apply."""
    loaded = _import_tensorflow.cache_info().currsize
    _LOAD_SETTINGS["intra_op_threads"].pin(intra_op_threads, loaded)
    _LOAD_SETTINGS["kernels"].pin(kernels, loaded)


@dataclasses.dataclass(frozen=True)
class _LoadSetting:
    """A run flag whose value TensorFlow reads from an environment variable once, as it loads."""

    flag: str
    variable: str
    default: object
    parse: object  # the variable's text -> the flag's value, or None where it means none
    encode: object  # the flag's value -> the variable's text
    meaning: str  # what the variable's text should be, for the error

    def value(self, requested):
        text = os.environ.get(self.variable)
        if text is None:
            return self.default if requested is None else requested
        value = self.parse(text.strip().lower())
        if value is None:
            raise ConfigError(f"{self.variable}={text!r} in the environment is not {self.meaning}")
        if requested is not None and requested != value:
            raise ConfigError(
                f"--{self.flag}={requested} contradicts {self.variable}={text} in the environment; drop one"
            )
        return value

    def pin(self, requested, loaded):
        if not loaded:
            os.environ[self.variable] = self.encode(self.value(requested))
        elif requested is not None and requested != self.value(None):
            raise ConfigError(
                f"--{self.flag}={requested}: TensorFlow loaded in this process with {self.variable}="
                f"{os.environ[self.variable]}, which it reads once"
            )


_LOAD_SETTINGS = {
    "intra_op_threads": _LoadSetting(
        "intra_op_threads",
        INTRA_OP_THREADS,
        PINNED_THREADS,
        parse=lambda text: int(text) if text.isdigit() and int(text) > 0 else None,
        encode=str,
        meaning="a thread count",
    ),
    "kernels": _LoadSetting(
        "kernels",
        CONTRACTION_KERNEL,
        "portable",
        parse={"false": "portable", "0": "portable", "true": "fast", "1": "fast"}.get,
        encode=lambda kernels: "false" if kernels == "portable" else "true",
        meaning="true or false",
    ),
}


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
