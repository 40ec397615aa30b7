"""All-reduce, all-gather and broadcast among the workers of an all-reduce cluster, with TensorFlow's
graph-mode collective ops (CollectiveReduce, CollectiveGather, CollectiveBcastSend/Recv: in TF 1.15 as
in 2.x, and how 1.15's CollectiveAllReduceStrategy worked in graph mode).

A collective is matched across workers by its group key and instance key, so every worker must make
the same collectives in the same order: `Collectives` numbers them as they are made, and every worker
builds the same graph. TensorFlow keeps what it learnt of a key (its shape, its members) for the life
of the process, so a process that runs several clusters one after another (the tests) gives each its
own group. The ring all-reduce adds in an order fixed by the ring, so its sums repeat bitwise; the
gather puts the pieces in worker order, which a fixed-order sum needs.
"""

import math

from parallel_tf.compat import tf

# How the workers' devices talk: NCCL between GPUs, device to device (seed 001); gRPC rings between CPUs.
GPU_HINT, CPU_HINT = "nccl", "auto"


class Collectives:
    """The collectives of one worker of `num_workers`, numbered as they are made, in group `group`."""

    def __init__(self, num_workers, task_index, group, on_gpu):
        self.num_workers, self.task_index, self.group = num_workers, task_index, group
        self._hint = GPU_HINT if on_gpu else CPU_HINT
        self._instances = 0

    def _next_instance(self):
        self._instances += 1
        return self._instances

    def _keys(self):
        return dict(group_size=self.num_workers, group_key=self.group, instance_key=self._next_instance())

    def sum(self, tensor):
        """Every worker's `tensor`, added (by a ring: each element in an order fixed by the ring)."""
        if self.num_workers == 1:  # nobody to talk to
            return tensor
        return tf.raw_ops.CollectiveReduce(
            input=tensor,
            merge_op="Add",
            final_op="Id",
            subdiv_offsets=[0],
            communication_hint=self._hint,
            **self._keys(),
        )

    def gather(self, tensor):
        """Every worker's `tensor` (each of the same shape), concatenated along the first axis in worker order."""
        if self.num_workers == 1:
            return tensor
        shape = tensor.shape.as_list()
        return tf.raw_ops.CollectiveGather(input=tensor, shape=shape, communication_hint=self._hint, **self._keys())

    def broadcast(self, variables):
        """The op that gives every worker the chief's values of `variables` (the chief sends, the others assign)."""
        if self.num_workers == 1:
            return tf.no_op()
        ops = []
        for variable in variables:
            shape, dtype = variable.shape.as_list(), variable.dtype.base_dtype
            if self.task_index == 0:
                ops.append(
                    tf.raw_ops.CollectiveBcastSend(
                        input=variable.read_value(), shape=shape, communication_hint=self._hint, **self._keys()
                    )
                )
            else:
                received = tf.raw_ops.CollectiveBcastRecv(
                    T=dtype, shape=shape, communication_hint=self._hint, **self._keys()
                )
                ops.append(variable.assign(received, read_value=False))
        return tf.group(*ops)


def pack(tensors):
    """One flat vector of `tensors` (float32), and the function that cuts such a vector back into their shapes."""
    shapes = [t.shape.as_list() for t in tensors]
    sizes = [math.prod(shape) for shape in shapes]
    flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)

    def unpack(vector):
        return [tf.reshape(part, shape) for part, shape in zip(tf.split(vector, sizes), shapes, strict=True)]

    return flat, unpack


def buckets(variables, bucket_mb):
    """The indices of `variables` in buckets, last layer first (backprop's order): a bucket closes once its
    gradients hold `bucket_mb` MB. 0: one bucket of them all."""
    if not bucket_mb:
        return [list(range(len(variables)))]
    closed, bucket, held = [], [], 0
    for index in reversed(range(len(variables))):
        bucket.append(index)
        held += variables[index].shape.num_elements() * variables[index].dtype.base_dtype.size
        if held >= bucket_mb * 1e6:
            closed.append(bucket)
            bucket, held = [], 0
    return closed + [bucket] if bucket else closed
