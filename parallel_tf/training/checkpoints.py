"""The chief's checkpoints: what is saved, when, and how rerunning a command resumes from them.

Saved: the variables the chief initialises (parameters, global step, optimizer slots, the
modes' counters), less per-step scratch (gradient slots). Everything else is rebuilt from them:
each mode's data position is a function of saved state (sync: the global step; async: the
steps a worker has pushed; hierarchical: the steps a group has sent to the central ps), and
worker-side copies are refreshed from the restored parameters. So a resumed sync run continues
with exactly the parameters and batches an uninterrupted one would have had.

A resume initialises only the scratch variables and then restores the rest, in the chief's one
`prepare_session`: the other workers see the model as ready only once it is restored.
"""

import os
import re

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.graph.model import SCRATCH

KEEP_LATEST = 3


class Checkpoints:
    """Build in the graph (before it is finalised), on the chief only."""

    def __init__(self, logdir, init_variables, only_finite=True):
        scratch = {v.name for v in tf.get_collection(SCRATCH)}
        saved = [v for v in init_variables if v.name not in scratch]
        self.prefix = os.path.join(logdir, "model.ckpt")
        self.latest = tf.train.latest_checkpoint(logdir)  # None: a fresh start
        # Relative paths in the `checkpoint` index: a logdir moved aside (--fresh) or copied still resumes.
        self._saver = tf.train.Saver(saved, sharded=True, max_to_keep=KEEP_LATEST, save_relative_paths=True)
        state = tf.train.get_checkpoint_state(logdir)
        if state:  # a resumed run's saver also rotates out the interrupted run's checkpoints
            self._saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
        if self.latest:
            self.init_op = tf.variables_initializer([v for v in init_variables if v.name in scratch])
        else:
            self.init_op = tf.variables_initializer(init_variables)
        # --nan_guard: a checkpoint is written only of finite parameters, so the last one kept is good
        self._finite = tf.reduce_all([tf.reduce_all(tf.is_finite(v)) for v in tf.trainable_variables()])
        self._only_finite = only_finite

    def restore(self, sess):
        """prepare_session's init_fn: after init_op, loads the latest checkpoint, if there is one. One that lacks a
        variable of this run's graph was written by another graph: a mistake no restart cures (ConfigError)."""
        if not self.latest:
            return
        try:
            self._saver.restore(sess, self.latest)
        except tf.errors.NotFoundError as e:
            missing = re.search(r"Key (\S+) not found in checkpoint", e.message)
            if not missing:
                raise
            raise ConfigError(
                f"{self.latest} has no {missing[1]}, which this run's graph has: it was written by another version "
                "of parallel_tf; resume it with that version, or give --fresh to start over"
            ) from None

    def save(self, sess, done):
        """Saves the variables after step `done`; with `only_finite`, refuses parameters that are NaN or
        infinite (TaskFailure), keeping the checkpoints before."""
        if self._only_finite and not sess.run(self._finite):
            raise TaskFailure(
                f"the parameters are not finite after step {done}: training diverged, so --nan_guard stopped it "
                f"and wrote no checkpoint of them; {self.kept()}"
            )
        self.latest = self._saver.save(sess, self.prefix, global_step=done, write_meta_graph=False)

    def kept(self):
        """Where the last good parameters are, for a message."""
        if not self.latest:
            return "no checkpoint was written before"
        return f"the last checkpoint, {os.path.basename(self.latest)}, is kept"
