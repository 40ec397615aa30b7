"""Synchronous SGD by all-reduce: workers only, each with its own copy of every variable, in lockstep.

Each step, every worker computes the gradients of its shard, the workers reduce them to one mean, and
every worker applies it with its own optimizer, so the copies stay equal bitwise. How they reduce is the
reduce hook's (seams.Reduce), a function of at most one technique's or option's module in the run: the plain
ring (graph/collectives.Ring: one vector, or one a bucket with --allreduce_bucket_mb, in half precision
with --allreduce_transport), PowerSGD's factors, gathered codes, strict determinism's fixed-order gather.
The chief initialises (or restores) and a broadcast gives every worker its values; at the end every
worker's parameter fingerprint is compared with the chief's.

The ring adds the N shard gradients in an order fixed by the ring: repeats are bitwise; with 1 or 2 workers
the sum is the parameter-server sync mode's (a + b is b + a), so the runs equal it bitwise; with more, the
ring's order is not its tree's (--strict_determinism gives sync strict's bits at every worker count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.errors import TaskFailure
from parallel_tf.graph import worker_state
from parallel_tf.graph.collectives import Collectives, Reducing, Ring, RingMeans, StepGradients
from parallel_tf.graph.model import StepReads, build_model, worker_gradients
from parallel_tf.graph.optimizers import scheduled
from parallel_tf.graph.placement import worker_device
from parallel_tf.training.declarations import Mode
from parallel_tf.training.modes.allreduce import allreduce_buckets, allreduce_transport
from parallel_tf.training.train_graph import Phase, StepReport, TrainGraph, drive, microbatch_passes

if TYPE_CHECKING:
    from parallel_tf.training.settings import Settings


def build(recipe, dataset, settings: Settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(on_worker):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        collectives = Collectives(num_workers, task_index, settings.collective_group, settings.num_gpus > 0)
        ring = Ring(collectives, settings.options.allreduce_transport, settings.options.allreduce_bucket_mb)
        variables = tf.trainable_variables()
        reducers = settings.hooks.reduce  # at most one (rules.py): its ways of reducing, or the plain ring's
        reducings = reducers[0].reduce(settings, ring, variables) if reducers else [RingMeans(ring)]
        # one for every phase: the run's slots
        optimizer = scheduled(settings.optimizer, settings.schedule, global_step)
        for technique in settings.hooks.optimizer:  # clipping
            optimizer = technique.optimizer(settings, optimizer)
        summed = []  # the ring's buckets of each phase's step, as drive builds them, in order

        def applying(reducing: Reducing):
            def step(model):
                """Every worker's loss, once the mean of its step's gradients is applied. No update starts before
                every mean is in, so none changes a variable backprop still reads (a bucket's collective may
                overlap backprop; with one worker it is no wait at all)."""
                read = model.reads.of(variables)
                passes = worker_gradients(recipe, model, reducing.passes, read)
                before = ring.summed_buckets
                reduction = reducing.reduce(StepGradients(passes, model.loss))
                summed.append(ring.summed_buckets - before)
                with tf.control_dependencies(reduction.means):
                    train_op = optimizer.apply_gradients(zip_strict(reduction.means, variables), global_step)
                with tf.control_dependencies([train_op]):
                    return StepReport(workers=tf.range(num_workers), losses=tf.identity(reduction.losses))

            return Phase(reducing.first, step)

        steps = drive(settings, recipe, model, [applying(r) for r in reducings], StepReads)
        # PowerSGD's errors, a codec's residuals: where a technique keeps state a worker (Declaration.worker_state)
        stash = worker_state.gathered(collectives, on_worker) if settings.keeps_worker_state else None
        broadcast = collectives.broadcast(tf.global_variables())  # the optimizer's slots too: made by apply
        fingerprint = tf.placeholder(tf.int32, [1, FINGERPRINT_INTS], name="params_fingerprint")
        fingerprints = collectives.gather(fingerprint)
    buckets = {"allreduce_buckets": tf.constant(summed[-1], tf.int64)} if settings.options.allreduce_bucket_mb else {}
    return TrainGraph(
        model=model,
        position=global_step,
        steps=steps,
        chief_waits_for_all=False,  # every step is a collective: nobody finishes a step before the others
        counters={**microbatch_passes(settings, settings.options.microbatches // num_workers), **buckets},
        initialise_on_join=lambda sess: sess.run(broadcast),
        stash=stash,
        after_last_step=lambda sess, named: _check_copies(sess, named, fingerprint, fingerprints, task_index),
    )


MODE = Mode(
    name="allreduce",
    build=build,
    workers_alone="all-reduce their gradients among themselves",
    lockstep=True,
    offers=("optimizer", "reduce", "ring"),
    options=(allreduce_buckets, allreduce_transport),
)


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
