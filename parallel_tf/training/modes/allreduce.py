"""Synchronous SGD by all-reduce: workers only, each with its own copy of every variable, in lockstep.

Each step, every worker computes the gradients of its shard, the workers add them up with one
collective (collectives.py: all of a step's gradients packed into one vector, with each worker's loss
in a slot of its own so the chief can log them; or one a bucket, --allreduce_bucket_mb, in half
precision with --allreduce_transport), and every worker applies the same mean with its own
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
from parallel_tf.graph import codecs, gathered_codes, powersgd, worker_state
from parallel_tf.graph.aggregation import tree_sum, worker_gradients
from parallel_tf.graph.collectives import Collectives, buckets, pack
from parallel_tf.graph.devices import worker_device
from parallel_tf.graph.model import build_model
from parallel_tf.training import techniques
from parallel_tf.training.rules import Mode
from parallel_tf.training.techniques import compression
from parallel_tf.training.train_graph import StepReport, TrainGraph, fixed_plan, microbatch_passes


def build(recipe, dataset, settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    with tf.device(worker_device(task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        optimizer = techniques.optimizer_for(settings, settings.schedule.at(global_step))
        collectives = Collectives(num_workers, task_index, settings.collective_group, settings.num_gpus > 0)
        variables = tf.trainable_variables()

        def applied(means, losses):
            """The report of a step that applies `means`: every worker's loss, once the update is done. No
            update starts before every mean is in, so none changes a variable backprop still reads (a
            bucket's collective may overlap backprop; with one worker it is no wait at all)."""
            with tf.control_dependencies(means):
                train_op = optimizer.apply_gradients(zip(means, variables, strict=True), global_step=global_step)
            with tf.control_dependencies([train_op]):
                return StepReport(workers=tf.range(num_workers), losses=tf.identity(losses))

        if settings.strict_determinism:
            plan = fixed_plan(applied(*_gathered_in_fixed_order(recipe, model, variables, collectives, settings)))
        elif settings.gradient_compression != "none":
            plan = fixed_plan(applied(*_gathered_codes(model, variables, collectives, settings, global_step)))
        elif settings.powersgd_rank:
            plan = _powersgd_plan(model, variables, collectives, settings, applied)
        else:
            plan = fixed_plan(applied(*_all_reduced(model, variables, collectives, settings)))
        stash = worker_state.gathered(collectives, worker_device(task_index, settings.num_gpus))
        broadcast = collectives.broadcast(tf.global_variables())  # the optimizer's slots too: made by apply
        fingerprint = tf.placeholder(tf.int32, [1, FINGERPRINT_INTS], name="params_fingerprint")
        fingerprints = collectives.gather(fingerprint)
    return TrainGraph(
        model=model,
        position=global_step,
        plan=plan,
        chief_waits_for_all=False,  # every step is a collective: nobody finishes a step before the others
        counters={
            **microbatch_passes(settings, settings.microbatches // num_workers),
            **_bucket_count(settings, variables),
            **_powersgd_count(settings, variables),
        },
        initialise_on_join=lambda sess: sess.run(broadcast),
        stash=stash,
        after_last_step=lambda sess, named: _check_copies(sess, named, fingerprint, fingerprints, task_index),
    )


def _all_reduced(model, variables, collectives, settings):
    """(the mean gradient of every variable, every worker's loss), from one all-reduce of each bucket
    (--allreduce_bucket_mb; one for all by default) sent as --allreduce_transport. The losses ride in
    the last bucket in float32, or, where the gradients go in another type, by a collective of their own."""
    gradients = tf.gradients(model.loss, variables)
    loss_slots = _loss_slots(model, collectives)
    transport = tf.as_dtype(settings.allreduce_transport)
    means = {}
    *early, last = buckets(variables, settings.allreduce_bucket_mb)
    for bucket in early:
        means.update(zip(bucket, _reduced([gradients[i] for i in bucket], collectives, transport)[0], strict=True))
    riding = loss_slots if transport == tf.float32 else None
    last_means, losses = _reduced([gradients[i] for i in last], collectives, transport, riding)
    means.update(zip(last, last_means, strict=True))
    if losses is None:
        losses = collectives.sum(loss_slots)
    return [means[index] for index in range(len(variables))], losses


def _loss_slots(model, collectives):
    """This worker's loss in its slot of N, zeros elsewhere: summed by all, every worker's loss (exact: + 0).
    Put in place, not multiplied by a one-hot: 0 · inf would make the other slots NaN."""
    return tf.scatter_nd([[collectives.task_index]], tf.reshape(model.loss, [1]), [collectives.num_workers])


def _reduced(gradients, collectives, transport, riding=None):
    """(the mean of every worker's `gradients`, added by one collective; the sum of `riding`, float32 slots sent
    in the same vector, or None). In float32 each worker's share is divided by N after the sum; in a half-
    precision `transport`, before it (in float32, then rounded), as PyTorch's fp16 hook does: N float16
    gradients near the type's largest value (65504) would overflow as a sum where their mean does not."""
    flat, unpack = pack(gradients)
    workers = float(collectives.num_workers)
    if transport == tf.float32 or collectives.num_workers == 1:  # with one worker nothing crosses or is rounded
        total = collectives.sum(flat if riding is None else tf.concat([flat, riding], axis=0))
        size = flat.shape.as_list()[0]
        return unpack(total[:size] / workers), None if riding is None else total[size:]
    return unpack(tf.cast(collectives.sum(tf.cast(flat / workers, transport)), tf.float32)), None


def _gathered_codes(model, variables, collectives, settings, global_step):
    """(the mean gradient of every variable, every worker's loss): --gradient_compression's codes of every
    worker gathered and decoded by all (graph/gathered_codes.py), the losses summed in float32. A random
    codec draws for variable i at step t from (t, stream·2¹⁶ + i), the stream seed·2¹⁶ + worker, as on the
    parameter servers."""
    codec = codecs.parse(settings.gradient_compression)
    seeds = codecs.seeds(global_step.read_value(), techniques.random_stream(settings), len(variables))
    feedback = compression.error_feedback(settings.options)
    gradients = tf.gradients(model.loss, variables)
    means, sent = gathered_codes.mean_of_codes(gradients, collectives, codec, feedback, seeds)
    for part in sent:
        tf.add_to_collection(compression.PAYLOADS, part)  # what compression's wrap counts
    return means, collectives.sum(_loss_slots(model, collectives))


def _powersgd_plan(model, variables, collectives, settings, applied):
    """PowerSGD's steps from --powersgd_start_step on, and the plain all-reduce's before: each a step graph
    of its own, so what a step sends is counted by the kind of step it is."""
    compressed = applied(*_powersgd_reduced(model, variables, collectives, settings))
    start = settings.powersgd_start_step
    if not start:
        return fixed_plan(compressed)
    plain = applied(*_all_reduced(model, variables, collectives, settings))
    return lambda step: [plain if step < start else compressed]


def _powersgd_reduced(model, variables, collectives, settings):
    """(the mean gradient of every variable, every worker's loss): the matrices PowerSGD compresses as its
    rank-r approximation (graph/powersgd.py), the others whole, in float32, with the losses."""
    gradients = tf.gradients(model.loss, variables)
    loss_slots = _loss_slots(model, collectives)
    low_rank = powersgd.LowRank(variables, settings.powersgd_rank, settings.powersgd_min_compression, settings.seed)
    compressed = low_rank.means([gradients[i] for i in low_rank.indices], collectives)
    means = dict(zip(low_rank.indices, compressed, strict=True))
    whole = [i for i in range(len(variables)) if i not in means]
    if whole:
        whole_means, losses = _reduced([gradients[i] for i in whole], collectives, tf.float32, loss_slots)
        means.update(zip(whole, whole_means, strict=True))
    else:
        losses = collectives.sum(loss_slots)
    return [means[index] for index in range(len(variables))], losses


def _powersgd_count(settings, variables):
    """--powersgd_rank's counter: the matrices that cross as factors."""
    if not settings.powersgd_rank:
        return {}
    rank, least = settings.powersgd_rank, settings.powersgd_min_compression
    return {
        "powersgd_matrices": tf.constant(
            sum(powersgd.compressible(v.shape.as_list(), rank, least) for v in variables), tf.int64
        )
    }


def _bucket_count(settings, variables):
    """--allreduce_bucket_mb's counter: the collectives a step's gradients go in."""
    if not settings.allreduce_bucket_mb:
        return {}
    return {"allreduce_buckets": tf.constant(len(buckets(variables, settings.allreduce_bucket_mb)), tf.int64)}


def _gathered_in_fixed_order(recipe, model, variables, collectives, settings):
    """(the mean gradient of every variable over all M microbatches, summed by sync's tree in microbatch
    order, every worker's loss), from one all-gather of each worker's microbatch gradients and its loss."""
    microbatches = settings.microbatches
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
