"""Synchronous SGD by all-reduce: workers only, each with its own copy of every variable, in lockstep.

Each step, every worker computes the gradients of its shard, the workers add them up with one
collective (collectives.py: all of a step's gradients packed into one vector, with each worker's loss
in a slot of its own so the chief can log them), and every worker applies the same mean with its own
optimizer, so the copies stay equal bitwise. The chief initialises (or restores) and a broadcast gives
every worker its values; at the end every worker's parameter fingerprint is compared with the chief's.

ordered: the ring adds the N shard gradients in an order fixed by the ring: repeats are bitwise; with
         1 or 2 workers the sum is the parameter-server sync mode's (a + b is b + a), so the runs equal
         it bitwise; with more, the ring's order is not its tree's.
strict:  each worker sends its microbatch gradients whole, every worker gathers all M of them in worker
         order and sums them with sync's fixed tree: the same arithmetic for every worker count that
         divides M, and as sync strict, bitwise. It costs M/2 times the all-reduce's bytes: each worker
         sends its M/N rows to, and gathers (N−1)·M/N rows from, the others, where the ring moves 2(N−1)/N
         of one vector each way (8 microbatches, 4 workers: 6 models each way against 1.5).
"""

from parallel_tf.compat import tf
from parallel_tf.errors import TaskFailure
from parallel_tf.graph.aggregation import tree_sum, worker_gradients
from parallel_tf.graph.collectives import Collectives, pack
from parallel_tf.graph.devices import worker_device
from parallel_tf.graph.model import build_model
from parallel_tf.training import techniques
from parallel_tf.training.rules import Mode
from parallel_tf.training.train_graph import StepReport, TrainGraph, fixed_plan, microbatch_passes


def build(recipe, dataset, settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    with tf.device(worker_device(task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        optimizer = techniques.optimizer_for(settings, settings.schedule.at(global_step))
        collectives = Collectives(num_workers, task_index, settings.collective_group, settings.num_gpus > 0)
        variables = tf.trainable_variables()
        if settings.strict_determinism:
            means, losses = _gathered_in_fixed_order(recipe, model, variables, collectives, settings.microbatches)
        else:
            means, losses = _all_reduced(model, variables, collectives)
        train_op = optimizer.apply_gradients(zip(means, variables, strict=True), global_step=global_step)
        with tf.control_dependencies([train_op]):
            report = StepReport(workers=tf.range(num_workers), losses=tf.identity(losses))
        broadcast = collectives.broadcast(tf.global_variables())  # the optimizer's slots too: made by apply
        fingerprint = tf.placeholder(tf.int32, [1, FINGERPRINT_INTS], name="params_fingerprint")
        fingerprints = collectives.gather(fingerprint)
    return TrainGraph(
        model=model,
        position=global_step,
        plan=fixed_plan(report),
        chief_waits_for_all=False,  # every step is a collective: nobody finishes a step before the others
        counters=microbatch_passes(settings, settings.microbatches // num_workers),
        initialise_on_join=lambda sess: sess.run(broadcast),
        after_last_step=lambda sess, named: _check_copies(sess, named, fingerprint, fingerprints, task_index),
    )


def _all_reduced(model, variables, collectives):
    """(the mean gradient of every variable, every worker's loss), from one all-reduce."""
    num_workers = collectives.num_workers
    flat, unpack = pack(tf.gradients(model.loss, variables))
    loss_slots = tf.one_hot(collectives.task_index, num_workers) * model.loss  # others' slots add zeros: exact
    total = collectives.sum(tf.concat([flat, loss_slots], axis=0))
    size = flat.shape.as_list()[0]
    return unpack(total[:size] / float(num_workers)), total[size:]


def _gathered_in_fixed_order(recipe, model, variables, collectives, microbatches):
    """(the mean gradient of every variable over all M microbatches, summed by sync's tree in microbatch
    order, every worker's loss), from one all-gather of each worker's microbatch gradients and its loss."""
    per_worker = microbatches // collectives.num_workers
    rows = []
    for gradients in worker_gradients(recipe, model, per_worker, variables):
        flat, unpack = pack(gradients)
        rows.append(tf.concat([flat, tf.reshape(model.loss, [1])], axis=0))
    gathered = collectives.gather(tf.stack(rows))  # [M, size + 1]: worker 0's microbatches first
    size = flat.shape.as_list()[0]
    mean = tree_sum(tf.unstack(gathered[:, :size])) / float(microbatches)
    return unpack(mean), gathered[::per_worker, size]


MODE = Mode(name="allreduce", build=build, workers_alone="all-reduce their gradients among themselves", lockstep=True)


FINGERPRINT_INTS = 8  # a SHA-256 digest as int32s


def _check_copies(sess, named, fingerprint, fingerprints, task_index):
    """Every worker's params_sha256 gathered by all; a copy that differs from the chief's is an error,
    on the chief and on that worker, naming it."""
    # here, not at the top: they import numpy, and the launcher imports the modes and must stay single-threaded
    import numpy as np

    from parallel_tf.training import outputs

    digest = outputs.params_sha256(named)
    mine = np.frombuffer(bytes.fromhex(digest), np.int32).reshape(1, FINGERPRINT_INTS)
    everyone = sess.run(fingerprints, {fingerprint: mine})
    apart = [w for w in range(len(everyone)) if not np.array_equal(everyone[w], everyone[0])]
    if apart and (task_index == 0 or task_index in apart):
        workers = ", ".join(f"worker:{w}" for w in apart)
        raise TaskFailure(
            f"{workers} ended on parameters that differ from the chief's ({digest[:16]}… here): the copies of "
            "an all-reduce run must stay equal bitwise"
        )
