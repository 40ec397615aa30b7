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
# Set before TensorFlow loads where the environment does not: its C++ logs (a failure is reported in one line of
# Python's; errors too, so a lost peer does not print gRPC's lines first), and oneDNN's ops off.
SET_BEFORE_LOADING = {"TF_CPP_MIN_LOG_LEVEL": "3", ONEDNN_OPTS: "0"}


@functools.cache
def _import_tensorflow():
    for variable, value in SET_BEFORE_LOADING.items():
        if _users(variable) is None:
            _set(variable, value)
    for setting in _LOAD_SETTINGS.values():  # where no run flag pinned them (the tools, a test process)
        if setting.variable not in _SET_HERE:
            setting.pin(None, loaded=False)
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
    else "portable". Portable kernels are refused beside oneDNN's ops (TF_ENABLE_ONEDNN_OPTS=1), whose bits
    follow the CPU: the run would not be what it says."""
    return _refuse_onednn_beside_portable(_LOAD_SETTINGS["kernels"].value(requested))


def _refuse_onednn_beside_portable(kernels):
    if kernels == "portable" and (_users(ONEDNN_OPTS) or "").strip().lower() not in ("", "0", "false"):
        raise ConfigError(
            f"{ONEDNN_OPTS}={os.environ[ONEDNN_OPTS]} in the environment turns on oneDNN's ops, whose bits follow "
            "the CPU, and --kernels=portable promises bits that do not: unset it, or choose --kernels=fast"
        )
    return kernels


def pin_before_loading(intra_op_threads=None, kernels=None):
    """Sets what TensorFlow reads from the environment as it loads, from the run's flags (None: unset);
    refused once it has loaded with something else (a process that trains several runs, as the tests do),
    which would silently not apply."""
    loaded = _import_tensorflow.cache_info().currsize
    _LOAD_SETTINGS["intra_op_threads"].pin(intra_op_threads, loaded)
    _refuse_onednn_beside_portable(_LOAD_SETTINGS["kernels"].value(kernels))
    _LOAD_SETTINGS["kernels"].pin(kernels, loaded)


# Variables oneDNN reads as TensorFlow loads it that can change a run's bits, besides those the run flags pin
# (kernels, threads) and oneDNN's switch (kernels() refuses it beside portable kernels), with the kernels under
# which they can: a run's identity records them (logdir.run_identity), so a resume under others is refused.
# The instruction-set cap moves no portable bit (tests/test_portable_bits.py runs under every one).
BITS_ENVIRONMENT = {
    ONEDNN_OPTS: KERNELS,
    "ONEDNN_MAX_CPU_ISA": ("fast",),
    "DNNL_MAX_CPU_ISA": ("fast",),  # oneDNN's older name for it
    "ONEDNN_DEFAULT_FPMATH_MODE": KERNELS,  # bfloat16 or TF32 arithmetic in oneDNN's products
    "DNNL_DEFAULT_FPMATH_MODE": KERNELS,
}


def bits_environment(kernels):
    """{variable: its value as TensorFlow reads it, or will (None: unset)} of BITS_ENVIRONMENT's variables that
    can move the bits of `kernels`: the user's, else what this package sets."""
    return {
        name: _users(name) or _SET_HERE.get(name, SET_BEFORE_LOADING.get(name))
        for name, moves in BITS_ENVIRONMENT.items()
        if kernels in moves
    }


# What this package set in the environment, "VARIABLE=value ...", in this process or in the one that started it:
# a process started by one that loaded TensorFlow (a test, a notebook) inherits its pins, which are not the user's.
SET_BY_PARALLEL_TF = "PARALLEL_TF_SET"
_SET_HERE = {}  # variable: value, what this process set


def _users(variable):
    """The environment's value of `variable` where the user set it: None where unset, or where this package set it
    (here, or in a process that started this one)."""
    value = os.environ.get(variable)
    set_by_us = dict(pair.split("=", 1) for pair in os.environ.get(SET_BY_PARALLEL_TF, "").split())
    return None if value is None or set_by_us.get(variable) == value else value


def _set(variable, value):
    """Sets `variable` for TensorFlow to read as it loads, noted as this package's."""
    os.environ[variable] = _SET_HERE[variable] = value
    set_by_us = dict(pair.split("=", 1) for pair in os.environ.get(SET_BY_PARALLEL_TF, "").split())
    os.environ[SET_BY_PARALLEL_TF] = " ".join(
        f"{name}={text}" for name, text in sorted({**set_by_us, variable: value}.items())
    )


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
        """`requested` (the flag, or None), checked against the user's environment; where neither says, what
        this process set, else the default."""
        text = _users(self.variable)
        if text is None:
            if requested is not None:
                return requested
            return self.parse(_SET_HERE[self.variable]) if self.variable in _SET_HERE else self.default
        value = self.parse(text.strip().lower())
        if value is None:
            raise ConfigError(f"{self.variable}={text!r} in the environment is not {self.meaning}")
        if requested is not None and requested != value:
            raise ConfigError(
                f"--{self.flag}={requested} contradicts {self.variable}={text} in the environment; drop one"
            )
        return value

    def pin(self, requested, loaded):
        """Sets the variable to the run's value before TensorFlow loads (the user's, where they set it, is checked
        against the flag and kept); once it has, refuses a flag that says otherwise than what it read."""
        if not loaded:
            value = self.value(requested)
            if _users(self.variable) is None:
                _set(self.variable, self.encode(value))
        elif requested is not None and requested != self.parse(os.environ[self.variable].strip().lower()):
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
