"""Variables split into even pieces over the parameter servers, as TF1's variable partitioners do, so that k
servers each carry about 1/k of a model's bytes.

replica_device_setter places whole variables, so one large variable puts most of a model on one server:
the CIFAR-10 CNN's dense kernel is 96% of its bytes, and four servers bought 1.05x on a link
(BENCHMARKS.md). Here a variable of more than PIECE_BYTES is made as up to k pieces cut along its first
axis, each a variable of its own that the device setter places greedily by size
(devices.ByteSizeLoadBalancer); smaller ones stay whole. The model reads the pieces concatenated back
into the variable's shape, and every piece's gradient is its rows of the variable's, so each element is
summed and updated as before: k servers train the same bits as one. The parameters a run reports
(params.npz, params_sha256) are the variables themselves, the pieces put together (`whole_values`).
"""

from parallel_tf.compat import tf

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
    groups = {}
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
