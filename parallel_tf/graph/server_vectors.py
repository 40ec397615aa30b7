"""One tensor each way per parameter server: a sync step's parameters read as one flat vector per ps
and split on the worker, its gradients sent as one flat vector per ps and split next to their slots.

TensorFlow sends every tensor a step consumes from another task as a RecvTensor RPC of its own, and
at the MLP's size it is those RPCs' CPU on both ends, not their bytes, that a parameter-server step
pays on a small machine (BENCHMARKS.md, "Parameter-server sync at its floor"): four variables cost
four RPCs down and four up. Flattening, concatenating and splitting move values without rounding
them, so a step computes exactly what it computed from the variables themselves.
"""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf


class PackedReads:
    """A custom getter (graph/model.py's model_on) that answers every one of `variables` with its part of
    one vector per parameter server, read on that server once, when the forward pass first asks, and
    split on the device the pass runs on. Made inside a loop's step, the reads are that step's."""

    def __init__(self, variables):
        self.variables = list(variables)
        self._values = {}

    def __call__(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        if not self._values:
            self._values = read_packed(self.variables)
        if not isinstance(variable, tf.Variable):  # a PartitionedVariable: pieces on several servers (placement.py)
            return tf.concat([self._values[piece.op.name] for piece in variable], axis=0)
        return self._values[variable.op.name]

    def of(self, variables):
        """The values the forward pass used for `variables`: what its gradients are taken with respect to."""
        return [self._values[variable.op.name] for variable in variables]


def read_packed(variables, after=()):
    """{op name: value} of `variables`, read as one vector on each server that holds some, once ops `after` have
    run there, and split where the caller computes."""
    values = {}
    for group in by_server(variables):
        with tf.colocate_with(group[0]), tf.control_dependencies(after):
            flat = tf.concat([tf.reshape(variable.read_value(), [-1]) for variable in group], 0)
        for variable, part in zip_strict(group, tf.split(flat, [_size(variable) for variable in group])):
            values[variable.op.name] = tf.reshape(part, variable.shape)
    return values


def sent_packed(gradients_by_microbatch, variables, riding=()):
    """(gradients_by_microbatch[k][v] (microbatch k, variable v) as the parameter servers receive them, the
    float32 scalars `riding` as the first server receives them): for each server, every microbatch's
    gradients of its variables flattened into one vector here, and split again next to the variables."""
    received = [[None] * len(variables) for _ in gradients_by_microbatch]
    arrived = []
    index = {variable.op.name: v for v, variable in enumerate(variables)}
    for server, group in enumerate(by_server(variables)):
        parts = [(k, index[variable.op.name]) for k in range(len(gradients_by_microbatch)) for variable in group]
        tensors = [gradients_by_microbatch[k][v] for k, v in parts] + (list(riding) if server == 0 else [])
        flat = tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], 0)
        with tf.colocate_with(group[0]):
            pieces = tf.split(flat, [tensor.shape.num_elements() for tensor in tensors])
            for (k, v), piece in zip(parts, pieces):
                received[k][v] = tf.reshape(piece, variables[v].shape)
            if server == 0:
                arrived = [tf.reshape(piece, []) for piece in pieces[len(parts) :]]
    return received, arrived


def by_server(variables):
    """`variables` grouped by the device they live on, each group and the groups in their first order."""
    groups: dict = {}
    for variable in variables:
        groups.setdefault(variable.device, []).append(variable)
    return list(groups.values())


def _size(variable):
    return variable.shape.num_elements()
