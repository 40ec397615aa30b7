"""The one place that imports TensorFlow.

Everything else does `from parallel_tf.compat import tf` and gets the TF1 graph-mode API
(`tf.compat.v1` with v2 behaviour disabled), so the package runs the same on TF 1.15 and on
TF 2.x. The one exception is the benchmark's peers, TensorFlow 2's own distribution strategies,
which ask for `tensorflow_v2()`. TF's C++ logs are quiet unless the user asks for them.

What TensorFlow reads from the environment once, as it loads, and what changes a run's bits, is pinned here
from the run's flags before the import (pin_before_loading):
- --kernels: portable (the default) runs every product in this package's own op (graph/portable_kernel.py)
  with oneDNN's ops and TensorFlow's custom contraction kernel off (TF_ENABLE_ONEDNN_OPTS=0,
  TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL=false), so nothing picks its code or its order of summation by the
  CPU; fast is TensorFlow's own fastest path, both on, whose bits are this machine's. A user's setting of
  either variable must agree with the kernels the run has: one that does not is refused, never silently obeyed.
- --intra_op_threads: TF_NUM_INTRAOP_THREADS (TensorFlow sizes its pool once a process, as its first session
  starts: a session's ConfigProto comes too late; a fork server's tasks set their own: repin_threads). No
  portable bit depends on it (tests/test_portable_bits.py runs at 1, 2 and 3); oneDNN's and TensorFlow's own
  products may split their sums by it, so a fast run's resume must keep it. Unset, 2 whatever the cores (a
  launch shares the cores between its workers: launch/local.py). Here the user's environment wins, and a flag
  that contradicts it is refused.
A process started by one that loaded TensorFlow (a test, a notebook) inherits these pins; PARALLEL_TF_SET marks
them as this package's, not the user's. summary.json's `kernels` records what the run had, and run.json the
environment that could move its bits besides (BITS_ENVIRONMENT).

The import happens on first use of `tf`, not when a module is loaded: a task refused for a bad
flag or spec exits in a fraction of a second instead of after TensorFlow's import (3-6 s).

TF 2.x also loads Keras eagerly while it imports (`keras.src.optimizers`, which pulls in
scikit-learn's wrappers); nothing here uses Keras, so that load is skipped: it was 40% of every
task's start-up (import median 6.2 s with it, 3.8 s without, five interleaved runs on this
machine). `tf.keras` still loads on first use. TF 1.15 has no such load.

What the import made (a quarter of a million objects, kept until the process ends) is frozen out of Python's
garbage collector: it walked them all at every full collection and again as the process exits, 0.7 s at the
end of every task (a TensorFlow process's exit after its last line: 0.76 s, 0.11 s frozen).
"""

from __future__ import annotations  # dict[str, str] on Python 3.7 too

import gc
import os
import platform
import sys
from typing import TYPE_CHECKING

from parallel_tf.backports import cache
from parallel_tf.errors import ConfigError

_KERAS_EAGER_LOAD = "keras.src.optimizers"  # what tensorflow/__init__.py imports, in try/except ImportError
ONEDNN_OPTS = "TF_ENABLE_ONEDNN_OPTS"
CONTRACTION_KERNEL = "TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL"  # read by TensorFlow's Eigen contraction
KERNELS = ("portable", "fast")  # --kernels
# What each kernels choice sets as TensorFlow loads: {variable: {kernels: its text}}
KERNEL_VARIABLES = {
    ONEDNN_OPTS: {"portable": "0", "fast": "1"},
    CONTRACTION_KERNEL: {"portable": "false", "fast": "true"},
}
INTRA_OP_THREADS = "TF_NUM_INTRAOP_THREADS"
# The portable kernel a CPU with AVX-512F runs: "avx2" asks for the narrower one, whose bits are the same
# (graph/portable_kernel.py); unset, the widest. Read once, as the kernels' library loads.
PORTABLE_KERNEL = "PARALLEL_TF_PORTABLE_KERNEL"
PINNED_THREADS = 2  # where neither --intra_op_threads nor the environment sets a count
LOG_LEVEL = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # errors too: a failure is one line of Python's, not gRPC's lines first
_at_its_defaults = [False]  # a peer of the bench: TensorFlow as it loads by itself (tensorflow_v2)


@cache
def _import_tensorflow():
    for variable, value in LOG_LEVEL.items():
        if _users(variable) is None:
            _set(variable, value)
    if not _at_its_defaults[0]:
        pin_before_loading()  # what no run flag pinned (the tools, a test process): the defaults
    skip_keras = _KERAS_EAGER_LOAD not in sys.modules
    if skip_keras:
        # makes that import raise ImportError, which TF passes over
        sys.modules[_KERAS_EAGER_LOAD] = None  # type: ignore[assignment]
    try:
        import tensorflow
    finally:
        if skip_keras:
            del sys.modules[_KERAS_EAGER_LOAD]  # a later import of it (tf.keras) works as usual
    gc.freeze()
    return tensorflow


def tensorflow_1():
    """Whether the TensorFlow of this environment is 1.x, known without importing it (a refusal stays well under a
    second): the one TensorFlow setup.py admits on Python 3.7 is 1.15, and on 3.8 and later 2.12 to 2.21, as their
    wheels are built; once it has loaded, its own version says."""
    if _loaded():
        return _import_tensorflow().__version__.startswith("1.")
    return sys.version_info < (3, 8)


def _loaded():
    return bool(_import_tensorflow.cache_info().currsize)


def kernels(requested=None):
    """The kernels a run's products run in, "portable" or "fast": `requested` (--kernels), else what this process
    pinned, else portable; ConfigError where the user's environment says otherwise (oneDNN's ops on beside
    portable kernels would silently move every hash)."""
    return _kernels(requested)


def intra_op_threads(requested=None):
    """The intra-op threads a run gets: `requested` (--intra_op_threads) or the environment's
    TF_NUM_INTRAOP_THREADS, which must agree where both are set, else what this process pinned, else
    PINNED_THREADS."""
    return _threads(requested)


def threads_set_by_user():
    """Whether the user's environment sets TF_NUM_INTRAOP_THREADS (not this package, here or in a parent)."""
    return _users(INTRA_OP_THREADS) is not None


def _kernels(requested):
    if _at_its_defaults[0]:
        return "fast"
    pinned = _SET_HERE.get(CONTRACTION_KERNEL, "")
    chosen = requested or {"false": "portable", "true": "fast"}.get(pinned, "portable")
    for variable in KERNEL_VARIABLES:
        text = _users(variable)
        if text is None:
            continue
        said = {"0": "portable", "false": "portable", "1": "fast", "true": "fast"}.get(text.strip().lower())
        if said is None:
            raise ConfigError(f"{variable}={text!r} in the environment is not true or false")
        if said != chosen:
            given = f"--kernels={chosen}" if requested else f"--kernels={chosen} (the default)"
            raise ConfigError(
                f"{variable}={text} in the environment asks for {'TensorFlow' if said == 'fast' else 'portable'}'s "
                f"kernels, and the run's are {given}: unset it, or choose --kernels={said}"
            )
    return chosen


def _threads(requested):
    text = _users(INTRA_OP_THREADS)
    if text is None:
        return requested or int(_SET_HERE.get(INTRA_OP_THREADS, PINNED_THREADS))
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"{INTRA_OP_THREADS}={text!r} in the environment is not a thread count")
    if requested is not None and requested != int(text):
        raise ConfigError(
            f"--intra_op_threads={requested} contradicts {INTRA_OP_THREADS}={text} in the environment; drop one"
        )
    return int(text)


def repin_threads(threads):
    """In a process forked from a fork server (launch/forkserver.py: TensorFlow loaded, no session run): `threads`
    as its intra-op count, which its first session sizes the pool by, on TensorFlow 1.15 and 2.x alike
    (tests/test_forkserver.py counts the threads). A launch's count is its own, whatever the server loaded with."""
    if _users(INTRA_OP_THREADS) is None:
        _set(INTRA_OP_THREADS, str(threads))


def pin_before_loading(intra_op_threads=None, kernels=None):
    """Sets what TensorFlow reads from the environment as it loads, from the run's flags (None: unset), checked
    against the user's environment; refused once it has loaded with something else (a process that trains
    several runs, as the tests do), which would silently not apply."""
    threads, chosen = _threads(intra_op_threads), _kernels(kernels)
    wanted = {
        INTRA_OP_THREADS: str(threads),
        **{variable: texts[chosen] for variable, texts in KERNEL_VARIABLES.items()},
    }
    if not _loaded():
        for variable, text in wanted.items():
            if _users(variable) is None:
                _set(variable, text)
        return
    flags = {INTRA_OP_THREADS: ("intra_op_threads", intra_op_threads), CONTRACTION_KERNEL: ("kernels", kernels)}
    for variable, (flag, given) in flags.items():
        if given is not None and os.environ[variable] != wanted[variable]:
            raise ConfigError(
                f"--{flag}={given}: TensorFlow loaded in this process with {variable}={os.environ[variable]}, "
                "which it reads once"
            )


# Variables oneDNN reads as TensorFlow loads it that can change a run's bits, besides those the run flags pin
# (kernels, threads), with the kernels under which they can: a run's identity records them (logdir.run_identity),
# so a resume under others is refused. The instruction-set cap moves no portable bit (tests/test_portable_bits.py
# runs under every one).
BITS_ENVIRONMENT = {
    "ONEDNN_MAX_CPU_ISA": ("fast",),
    "DNNL_MAX_CPU_ISA": ("fast",),  # oneDNN's older name for it
    "ONEDNN_DEFAULT_FPMATH_MODE": KERNELS,  # bfloat16 or TF32 arithmetic in oneDNN's products
    "DNNL_DEFAULT_FPMATH_MODE": KERNELS,
}


def bits_environment(kernels):
    """{variable: the user's value (None: unset)} of BITS_ENVIRONMENT's variables that can move the bits of
    `kernels`."""
    return {name: _users(name) for name, moves in BITS_ENVIRONMENT.items() if kernels in moves}


def kernel_path():
    """What a run's CPU bits depend on, for summary.json. `bits` says which kind of hash the run's is:
    "portable" with --kernels=portable (oneDNN's ops are refused beside them: kernels()), the same on
    every x86-64 machine with AVX2 at any thread count; "this machine's" with --kernels=fast."""
    # TensorFlow 1.15's wheel has no oneDNN ops: its variable changes nothing there
    onednn_opts = os.environ.get(ONEDNN_OPTS, "").strip().lower() in ("1", "true") and not tensorflow_1()
    chosen = kernels()
    return {
        "bits": "portable" if chosen == "portable" else "this machine's",
        "kernels": chosen,
        "onednn_opts": onednn_opts,
        "intra_op_threads": intra_op_threads(),
        **cpu(),
    }


def cpu():
    """The CPU's model name and which of the extensions that change kernels' bits it has (Linux's cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in f if ":" in line)}
    except OSError:
        return {"cpu": platform.processor(), "cpu_extensions": []}
    flags = set(fields.get("flags", "").split())
    return {
        "cpu": fields.get("model name", ""),
        "cpu_extensions": [x for x in ("avx2", "fma", "avx512f") if x in flags],
    }


# What this package set in the environment, "VARIABLE=value ...", in this process or in the one that started it:
# a process started by one that loaded TensorFlow (a test, a notebook) inherits its pins, which are not the user's.
SET_BY_PARALLEL_TF = "PARALLEL_TF_SET"
_SET_HERE: dict[str, str] = {}  # variable: value, what this process set


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


@cache
def _tensorflow_v1():
    v1 = _import_tensorflow().compat.v1
    v1.get_logger().setLevel("ERROR")
    v1.disable_v2_behavior()
    return v1


def at_tensorflows_defaults():
    """Before TensorFlow loads: load it as it loads by itself (its kernels, oneDNN's ops, its thread count: what a
    user who picks it gets), the recipe's layers in TensorFlow's own ops (kernels() says fast). For the bench's
    peers, TensorFlow's own strategies (tools/tf_strategies.py)."""
    if _loaded():
        raise ConfigError("TensorFlow loaded in this process already, with this package's pins")
    _at_its_defaults[0] = True


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


if TYPE_CHECKING:  # a type checker reads tf.Tensor and the like as TensorFlow's own (untyped: Any)
    import tensorflow.compat.v1 as tf
else:
    tf = _LazyTensorFlowV1()
