"""TensorFlow's SyncReplicasOptimizer, set up the one way this package runs it (sync's accumulator,
backup workers, and each hierarchical group). Each choice was worked out from TF's source:

- Explicit initialisation instead of `make_session_run_hook` (whose path races, TF issue #7970):
  the chief runs `chief_init_op`, the others `local_step_init_op` once the chief's variables are
  ready.
- No initial tokens: with TF's default of N, each worker's first step returns before the update
  is applied, its next gradient is then stale and dropped, and the data position drifts from the
  global step. With none, a worker's train op returns only once its step's update is applied.
- The chief runs the sync op (take R gradients, apply their average, bump the step, hand out
  tokens) itself, inside its step or in a thread of its own, never through the chief queue
  runner, whose thread is left blocked in `take_grad` after the last step, so closing the session
  waits on it forever once the parameter servers have gone.
"""

import dataclasses

from parallel_tf.compat import tf


@dataclasses.dataclass(frozen=True)
class SyncReplicas:
    train_op: object  # a worker's step: compute its gradients and hand them to the accumulators
    sync_op: object  # the chief's: take R gradients, apply their average, hand out the next tokens
    local_init_op: object
    ready_for_local_init_op: object
    optimizer: object  # the SyncReplicasOptimizer itself


def sync_replicas(optimizer, loss, global_step, replicas, total, is_chief, var_list=None, before_apply=None):
    """`optimizer` applied once `replicas` of `total` workers' gradients of `loss` are in, averaged.

    `before_apply(grads_and_vars) -> grads_and_vars` may add ops to the gradients before they
    are handed over (backup workers count them).
    """
    sync_optimizer = tf.train.SyncReplicasOptimizer(optimizer, replicas_to_aggregate=replicas, total_num_replicas=total)
    grads_and_vars = sync_optimizer.compute_gradients(loss, var_list=var_list)
    if before_apply:
        grads_and_vars = before_apply(grads_and_vars)
    train_op = sync_optimizer.apply_gradients(grads_and_vars, global_step=global_step)
    (sync_op,) = sync_optimizer.get_chief_queue_runner().enqueue_ops
    return SyncReplicas(
        train_op=train_op,
        sync_op=sync_op,
        local_init_op=sync_optimizer.chief_init_op if is_chief else sync_optimizer.local_step_init_op,
        ready_for_local_init_op=sync_optimizer.ready_for_local_init_op,
        optimizer=sync_optimizer,
    )
