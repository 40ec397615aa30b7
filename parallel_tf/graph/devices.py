"""A process's devices and the options of its sessions: the GPUs it sees, deterministic GPU kernels, what its
CPU bits depend on, and the options every session and server of a task runs with. Where a graph's ops and
variables live is placement.py's."""

import os
import platform

from parallel_tf import compat
from parallel_tf.compat import tf


def visible_gpu_count():
    return len(tf.config.experimental.list_physical_devices("GPU"))


DETERMINISTIC_OPS = "TF_DETERMINISTIC_OPS"


def use_deterministic_gpu_kernels():
    """Asks TensorFlow for deterministic GPU kernels (cuDNN convolutions, bias and reduction gradients),
    unless the user set TF_DETERMINISTIC_OPS: without it, a worker pinned to a GPU computes with kernels
    whose summation order varies from run to run, and no bitwise promise would hold there. Set before the
    first session; TensorFlow reads it when it first builds a kernel. Returns the value in force."""
    return os.environ.setdefault(DETERMINISTIC_OPS, "1")


def kernel_path():
    """What a run's CPU bits depend on, for summary.json. `bits` says which kind of hash the run's is:
    "portable" with --kernels=portable (oneDNN's ops are refused beside them: compat.kernels), the same on
    every x86-64 machine with AVX2 at the same thread count; "this machine's" with --kernels=fast."""
    onednn_opts = os.environ.get(compat.ONEDNN_OPTS, "").strip().lower() in ("1", "true")
    kernels = compat.kernels()
    return {
        "bits": "portable" if kernels == "portable" else "this machine's",
        "kernels": kernels,
        "onednn_opts": onednn_opts,
        "intra_op_threads": compat.intra_op_threads(),
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


def server_config(cluster):
    """A task's server options: session_config's, and in a cluster of workers only (all-reduce) the worker
    that resolves who takes part in each collective (TensorFlow's group leader), the chief."""
    config = session_config()
    if not cluster.num_ps:
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    return config


def session_config(device_filters=None, operation_timeout_secs=0):
    """Session options every task uses: soft placement for ops without GPU kernels, GPU memory
    taken as needed, so workers sharing a GPU (more workers than GPUs) do not starve each other,
    and a deadline on every blocking op (0: none), so a dead peer is an error, not a hang. Idle
    threads sleep instead of spinning, where TensorFlow has the option (not 1.15): several tasks share
    a machine's cores, and a spinning thread of one takes them from the others. The intra-op threads
    are compat.py's pinned count (TensorFlow 1.15 sizes its pool from the first session's options)."""
    config = tf.ConfigProto(
        allow_soft_placement=True,
        device_filters=device_filters or [],
        operation_timeout_in_ms=int(operation_timeout_secs * 1000),
        intra_op_parallelism_threads=compat.intra_op_threads(),
    )
    config.gpu_options.allow_growth = True
    if "disable_thread_spinning" in config.experimental.DESCRIPTOR.fields_by_name:
        config.experimental.disable_thread_spinning = True
    return config
