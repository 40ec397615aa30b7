"""Where a graph's ops and variables live: a worker's compute pinned to its GPU, the parameters on the parameter
servers' CPUs spread by their bytes, and large variables cut into even pieces over those servers.

Worker i computes on GPU (i mod G) when its process sees G > 0 GPUs, else on its CPU. Parameters always live on a
ps task's CPU, each variable on the least loaded task (greedy by bytes, `ByteSizeLoadBalancer`).

replica_device_setter places whole variables, so one large variable puts most of a model on one server: the
CIFAR-10 CNN's dense kernel is 96% of its bytes, and four servers bought 1.05x on a link (BENCHMARKS.md). So a
variable of more than PIECE_BYTES is made as up to k pieces cut along its first axis, as TF1's variable
partitioners do, each a variable of its own that the device setter places by size; smaller ones stay whole. The
model reads the pieces concatenated back into the variable's shape, and every piece's gradient is its rows of the
variable's, so each element is summed and updated as before: k servers train the same bits as one. The
parameters a run reports (params.npz, params_sha256) are the variables themselves, the pieces put together
(`whole_values`).
"""

from parallel_tf.compat import tf


def worker_device(task_index, num_gpus):
    """The device string that pins worker `task_index`'s compute."""
    if num_gpus > 0:
        return f"/job:worker/task:{task_index}/device:GPU:{task_index % num_gpus}"
    return f"/job:worker/task:{task_index}/device:CPU:0"


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


PIECE_BYTES = 1024  # a variable smaller than this stays whole: a bias is not worth a piece (an RPC) of its own


def pieces_over(pieces):
    """The partitioner that cuts a variable of more than PIECE_BYTES along its first axis into up to `pieces`
    pieces (one a server, or the pipeline's several a server: graph/pipeline.py); None for one."""
    if pieces <= 1:
        return None
    return tf.min_max_variable_partitioner(max_partitions=pieces, axis=0, min_slice_size=PIECE_BYTES)


def split_by(partitioner, shape, dtype):
    """Whether `partitioner` cuts a variable of `shape` and `dtype` into more than one piece."""
    shape = tf.TensorShape(shape)
    if partitioner is None or not shape.is_fully_defined() or not shape.rank:
        return False
    return max(partitioner(shape=shape, dtype=tf.as_dtype(dtype or tf.float32))) > 1


def whole_name(variable):
    """The name of the variable `variable` is a piece of (without ":0"), or its own."""
    info = variable._get_save_slice_info()
    return info.full_name if info else variable.op.name


def by_whole_variable(variables):
    """{whole name: its pieces in order along the first axis (or the one variable)}, in first-seen order."""
    groups: dict = {}
    for variable in variables:
        groups.setdefault(whole_name(variable), []).append(variable)
    for pieces in groups.values():
        pieces.sort(key=lambda piece: piece._get_save_slice_info().var_offset[0] if len(pieces) > 1 else 0)
    return groups


def whole(name, variables):
    """Variable `name` of `variables`, as a tensor: the pieces concatenated, where it was split."""
    pieces = by_whole_variable(variables)[name]
    return pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=0)


def whole_values(sess, variables):
    """{name + ":0": value} of every variable `variables` holds, pieces put together: what a run reports."""
    import numpy as np  # here: the launcher imports the graph modules and must not load numpy

    groups = by_whole_variable(variables)
    values = sess.run(groups)
    return {f"{name}:0": parts[0] if len(parts) == 1 else np.concatenate(parts) for name, parts in values.items()}
