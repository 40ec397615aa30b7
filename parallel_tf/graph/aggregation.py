"""Sync-mode gradient aggregation in a fixed order, so training repeats bitwise at any worker count.

SyncReplicasOptimizer's accumulators add gradients in arrival order; with three or more workers
that order, and so the last bits of the sum, change from run to run. Here each trainable
variable has M gradient slots, kept next to it on its parameter server. Worker i writes the
gradients of its microbatches into their slots; once every worker has written (a barrier), the
chief sums the M slots with a fixed pairwise tree, on the parameter servers, divides by M and
applies the mean with the optimizer; a second barrier holds everyone until it has.

ordered:  one microbatch per worker, its whole shard (M = N). Repeats are bitwise; different
          worker counts differ by rounding, since N shard means are not one batch mean.
strict:   the global batch is always cut into the same M microbatches (--microbatches), each with
          a forward and backward pass of its own, of the same shape whatever N; with the same
          tree over them, the arithmetic is the same for every worker count that divides M.
"""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.collectives import pack
from parallel_tf.graph.model import SCRATCH


def tree_sum(tensors):
    """((t0 + t1) + (t2 + t3)) + ...: a sum whose order depends only on how many terms there are."""
    while len(tensors) > 1:
        paired = [a + b for a, b in zip(tensors[0::2], tensors[1::2])]
        tensors = paired + tensors[len(paired) * 2 :]
    return tensors[0]


class SlotAggregator:
    """Gradient slots for `num_microbatches` microbatches, and the ops that fill, sum and apply them."""

    def __init__(self, variables, num_microbatches):
        self.variables = list(variables)
        self.num_microbatches = num_microbatches
        self.slots = []
        for variable in self.variables:
            with tf.colocate_with(variable):
                self.slots.append(
                    tf.get_variable(
                        variable.op.name.replace("/", "_") + "_gradient_slots",
                        [num_microbatches, *variable.shape.as_list()],
                        variable.dtype.base_dtype,
                        tf.zeros_initializer(),
                        trainable=False,
                        collections=[tf.GraphKeys.GLOBAL_VARIABLES, SCRATCH],
                    )
                )

    def write(self, first_microbatch, gradients_by_microbatch, only=None):
        """Stores gradients_by_microbatch[k][i] (microbatch first_microbatch + k, variable i, or only[i] of a
        piece of the variables: indices) in their slots."""
        writes = []
        for i, v in enumerate(range(len(self.slots)) if only is None else only):
            slot = self.slots[v]
            with tf.colocate_with(slot):  # where the slot is: a decoded gradient (compression) stays there
                if len(gradients_by_microbatch) == 1:  # a row: a stack of one would be sent twice (see below)
                    writes.append(tf.scatter_update(slot, first_microbatch, gradients_by_microbatch[0][i]))
                    continue
                stacked = tf.stack([gradients[i] for gradients in gradients_by_microbatch])
                indices = list(range(first_microbatch, first_microbatch + len(gradients_by_microbatch)))
                writes.append(tf.scatter_update(slot, indices, stacked))
        return tf.group(*writes)

    def apply(self, optimizer, global_step, after, rows=None, only=None):
        """Once `after` (ops) has run: every variable's slots (or only `rows`, an int32 vector of known length,
        in its order) summed by `tree_sum` on its ps, divided by their count, and applied with `optimizer`; of
        the variables `only` (indices), where given, and counted by `global_step` unless it is None."""
        count = self.num_microbatches if rows is None else rows.shape.as_list()[0]
        indices = range(len(self.slots)) if only is None else only
        means = []
        for v in indices:
            with tf.colocate_with(self.slots[v]), tf.control_dependencies(after):
                slot = self.slots[v].read_value()
                summed = slot if rows is None else tf.gather(slot, rows)
                means.append(tree_sum(tf.unstack(summed, count)) / float(count))
        pairs = zip_strict(means, [self.variables[v] for v in indices])
        return optimizer.apply_gradients(pairs, global_step=global_step)


def gathered_in_fixed_order(gradients, collectives, microbatches):
    """(the mean gradient of every variable over all `microbatches`, summed by the tree above in microbatch
    order, every worker's loss): all-reduce's strict reduction of a step's `gradients` (collectives.StepGradients,
    a pass a microbatch), from one gather of each worker's microbatch gradients and its loss, so every worker
    count that divides M sums as sync strict does."""
    per_worker = microbatches // collectives.num_workers
    rows = []
    for passed in gradients.passes:
        flat, unpack = pack(passed)
        rows.append(tf.concat([flat, tf.reshape(gradients.loss, [1])], axis=0))
    gathered = collectives.gather(tf.stack(rows))  # [M, size + 1]: worker 0's microbatches first
    size = flat.shape.as_list()[0]
    return unpack(tree_sum(tf.unstack(gathered[:, :size])) / float(microbatches)), gathered[::per_worker, size]
