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

from __future__ import annotations  # the tf.Tensor annotations below must not import TensorFlow

import abc
import dataclasses

from parallel_tf.backports import prod, zip_strict
from parallel_tf.compat import tf

# How the workers' devices talk: NCCL between GPUs, device to device (seed 001); gRPC rings between CPUs.
GPU_HINT, CPU_HINT = "nccl", "auto"


INSTANCES_A_GROUP = 2**20  # collectives a group may make: its instance keys are group·2²⁰ + 1, 2, ...


class Collectives:
    """The collectives of one worker of `num_workers`, numbered as they are made, in group `group`."""

    def __init__(self, num_workers, task_index, group, on_gpu):
        self.num_workers, self.task_index, self.group = num_workers, task_index, group
        self._hint = GPU_HINT if on_gpu else CPU_HINT
        self._instances = 0

    def _next_instance(self):
        """A key no other group's collective has: TensorFlow 1.15 keys a collective by its instance key alone, so
        two groups' (two runs in one process, as the in-process tests train) would meet as one."""
        self._instances += 1
        return self.group * INSTANCES_A_GROUP + self._instances

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
    sizes = [prod(shape) for shape in shapes]
    flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)

    def unpack(vector):
        return [tf.reshape(part, shape) for part, shape in zip_strict(tf.split(vector, sizes), shapes)]

    return flat, unpack


def buckets(tensors, bucket_mb):
    """The indices of `tensors` (variables, or their gradients) in buckets, last first (backprop's order): a
    bucket closes once it holds `bucket_mb` MB. 0: one bucket of them all."""
    if not bucket_mb:
        return [list(range(len(tensors)))]
    closed, bucket, held = [], [], 0
    for index in reversed(range(len(tensors))):
        bucket.append(index)
        held += tensors[index].shape.num_elements() * tensors[index].dtype.base_dtype.size
        if held >= bucket_mb * 1e6:
            closed.append(bucket)
            bucket, held = [], 0
    return closed + [bucket] if bucket else closed


@dataclasses.dataclass(frozen=True)
class StepGradients:
    """What a way of reducing is handed for one step: this worker's gradients of the variables as the step read
    them, a list a pass (one pass of its whole shard, or the Reducing's `passes` microbatches of it, each with a
    forward and backward pass of its own), and the worker's loss."""

    passes: list[list[tf.Tensor]]
    loss: tf.Tensor

    @property
    def whole(self) -> list[tf.Tensor]:
        """The gradients of the one pass over the whole shard."""
        (gradients,) = self.passes
        return gradients


class Reducing(abc.ABC):
    """A way of reducing a step's gradients (all-reduce's reduce hook), from step `first` on: its `reduce` builds
    one step's Reduction of the StepGradients the mode hands it, `passes` of them a worker. A step is built once a
    phase (and once in a loop of steps): the state it keeps is made before, by __init__."""

    first = 0  # the first step it reduces: a phase of the driver starts there
    passes = 1  # the forward and backward passes a worker makes of its shard a step

    @abc.abstractmethod
    def reduce(self, gradients: StepGradients) -> Reduction:
        """Each variable's mean over the workers and every worker's loss, built from this worker's gradients."""


@dataclasses.dataclass(frozen=True)
class Reduction:
    """What one way of reducing makes of a step (all-reduce's reduce hook): each variable's mean gradient over
    the workers, in the variables' order, and every worker's loss (`losses`, N, for the chief's log)."""

    means: list
    losses: tf.Tensor


class Ring:
    """How float tensors are averaged over the workers by the ring: packed into one vector a bucket (`bucket_mb`:
    last tensor first, as backprop makes them, one collective each; 0: one for all), each worker's share, 1/N
    of its tensors, sent in `transport` (float32, or half precision: divided before it is rounded, so N shares
    near float16's largest value do not overflow where their mean would not), the means back in float32.
    With one worker nothing crosses, so nothing is rounded to the transport. `summed_buckets` counts the buckets
    means() has built, so a step's count (all-reduce's --allreduce_bucket_mb counter) is what its build made."""

    def __init__(self, collectives, transport="float32", bucket_mb=0.0):
        self.collectives, self.transport, self.bucket_mb = collectives, tf.as_dtype(transport), bucket_mb
        self.summed_buckets = 0

    def means(self, tensors, riding=None):
        """(each of `tensors`' mean over the workers, the sum of `riding`, float32 slots that go in the last
        bucket where it crosses in float32 and in a collective of their own where it does not)."""
        if not tensors:
            return [], None if riding is None else self.collectives.sum(riding)
        means = {}
        *early, last = buckets(tensors, self.bucket_mb)
        self.summed_buckets += len(early) + 1
        for bucket in early:
            means.update(zip_strict(bucket, self._mean([tensors[i] for i in bucket])[0]))
        rides = riding is not None and (self.transport == tf.float32 or self.collectives.num_workers == 1)
        last_means, summed = self._mean([tensors[i] for i in last], riding if rides else None)
        means.update(zip_strict(last, last_means))
        if riding is not None and not rides:
            summed = self.collectives.sum(riding)
        return [means[index] for index in range(len(tensors))], summed

    def _mean(self, tensors, riding=None):
        flat, unpack = pack(tensors)
        workers = float(self.collectives.num_workers)
        if self.transport == tf.float32 or self.collectives.num_workers == 1:
            total = self.collectives.sum(flat if riding is None else tf.concat([flat, riding], axis=0))
            size = flat.shape.as_list()[0]
            return unpack(total[:size] / workers), None if riding is None else total[size:]
        return unpack(tf.cast(self.collectives.sum(tf.cast(flat / workers, self.transport)), tf.float32)), None

    def loss_slots(self, loss):
        """This worker's loss in its slot of N, zeros elsewhere: summed by all, every worker's loss (exact: + 0).
        Put in place, not multiplied by a one-hot: 0 · inf would make the other slots NaN."""
        collectives = self.collectives
        return tf.scatter_nd([[collectives.task_index]], tf.reshape(loss, [1]), [collectives.num_workers])


class RingMeans(Reducing):
    """The plain ring's way of reducing, from step 0: every gradient's mean, the losses riding in the last bucket."""

    def __init__(self, ring: Ring):
        self.ring = ring

    def reduce(self, gradients) -> Reduction:
        means, losses = self.ring.means(gradients.whole, riding=self.ring.loss_slots(gradients.loss))
        return Reduction(means, losses)
