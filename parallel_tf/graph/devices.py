"""Where ops live: worker GPU pinning and parameter placement across ps tasks.

Worker i computes on GPU (i mod G) when its process sees G > 0 GPUs, else on its CPU.
Parameters always live on a ps task's CPU, spread by size (greedy, largest load first out).
"""

import os
import platform

from parallel_tf import compat
from parallel_tf.compat import tf


def worker_device(task_index, num_gpus):
    """The device string that pins worker `task_index`'s compute."""
    if num_gpus > 0:
        return f"/job:worker/task:{task_index}/device:GPU:{task_index % num_gpus}"
    return f"/job:worker/task:{task_index}/device:CPU:0"


def visible_gpu_count():
    return len(tf.config.experimental.list_physical_devices("GPU"))


DETERMINISTIC_OPS = "TF_DETERMINISTIC_OPS"


def use_deterministic_gpu_kernels():
    """Asks TensorFlow for deterministic GPU kernels (cuDNN convolutions, bias and reduction gradients),
    unless the user set TF_DETERMINISTIC_OPS: without it, a worker pinned to a GPU computes with kernels
    whose summation order varies from run to run, and no bitwise promise would hold there. Set before the
    first session; TensorFlow reads it when it first builds a kernel. Returns the value in force."""
    return os.environ.setdefault(DETERMINISTIC_OPS, "1")


class ByteSizeLoadBalancer:
    """A ps_strategy for replica_device_setter: each variable goes to the least loaded ps task.

    TF 2.x removed contrib's GreedyLoadBalancingStrategy; this is the same idea, small.
    Placement depends only on the order and shapes of variables, so every worker agrees.
    """

    def __init__(self, num_tasks):
        self._loads = [0] * num_tasks

    def __call__(self, op):
        task = self._loads.index(min(self._loads))  # the first least loaded, as numpy's argmin
        self._loads[task] += _variable_bytes(op)
        return task


def _variable_bytes(op):
    shape = tf.TensorShape(op.get_attr("shape"))
    elements = shape.num_elements() if shape.is_fully_defined() else 1
    return elements * tf.as_dtype(op.get_attr("dtype")).size


def device_setter(cluster, task_index, num_gpus):
    """replica_device_setter for worker `task_index`: variables on ps CPUs, compute pinned."""
    return tf.train.replica_device_setter(
        ps_tasks=cluster.num_ps,
        ps_device="/job:ps/device:CPU:0",
        worker_device=worker_device(task_index, num_gpus),
        cluster=tf.train.ClusterSpec(cluster.as_dict()),
        ps_strategy=ByteSizeLoadBalancer(cluster.num_ps),
    )


def server_cpu(job, task):
    """The CPU of a parameter server task, central (job ps) or local (job local_ps)."""
    return f"/job:{job}/task:{task}/device:CPU:0"


def worker_device_filters(cluster, task_index):
    """The tasks a worker's sessions may talk to: the servers it uses, and itself.

    In hierarchical mode that keeps a worker away from the other groups' local parameter servers.
    """
    servers = [f"/job:{job}/task:{task}" for job, task in cluster.servers_of(task_index)]
    return [*servers, f"/job:worker/task:{task_index}"]


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
