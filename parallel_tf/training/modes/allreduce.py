"""Synchronous SGD by all-reduce: workers only, each with its own copy of every variable, in lockstep.

Each step, every worker computes the gradients of its shard, the workers reduce them to one mean, and
every worker applies it with its own optimizer, so the copies stay equal bitwise. How they reduce is the
reduce hook's (rules.Declaration.reduces), owned by at most one technique or option of the run: the plain
ring (graph/collectives.Ring: one vector, or one a bucket with --allreduce_bucket_mb, in half precision
with --allreduce_transport), PowerSGD's factors, gathered codes, strict determinism's fixed-order gather.
The chief initialises (or restores) and a broadcast gives every worker its values; at the end every
worker's parameter fingerprint is compared with the chief's.

The ring adds the N shard gradients in an order fixed by the ring: repeats are bitwise; with 1 or 2 workers
the sum is the parameter-server sync mode's (a + b is b + a), so the runs equal it bitwise; with more, the
ring's order is not its tree's (--strict_determinism gives sync strict's bits at every worker count).
"""

from parallel_tf.compat import tf
from parallel_tf.errors import TaskFailure
from parallel_tf.graph import worker_state
from parallel_tf.graph.collectives import Collectives, Ring
from parallel_tf.graph.devices import worker_device
from parallel_tf.graph.loops import StepReads, steps_in_one_run
from parallel_tf.graph.model import build_model
from parallel_tf.training import techniques
from parallel_tf.training.rules import Mode
from parallel_tf.training.train_graph import StepReport, TrainGraph, microbatch_passes


def build(recipe, dataset, settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    with tf.device(worker_device(task_index, settings.num_gpus)):
        model = build_model(recipe, dataset)
        global_step = tf.train.get_or_create_global_step()
        collectives = Collectives(num_workers, task_index, settings.collective_group, settings.num_gpus > 0)
        ring = Ring(collectives, settings.allreduce_transport, settings.allreduce_bucket_mb)
        variables = tf.trainable_variables()

        def reductions(model, gradients_of):
            """[(the first step it reduces, Reduction)]: the reduce hook's owner's (rules.py), or the plain ring's."""
            if settings.reducer:
                return settings.reducer(settings, recipe, model, gradients_of, ring)
            return [(0, ring.reduce(model, gradients_of))]

        def applied(reduction, optimizer):
            """The report of a step that applies `reduction`'s means: every worker's loss, once the update is
            done. No update starts before every mean is in, so none changes a variable backprop still reads
            (a bucket's collective may overlap backprop; with one worker it is no wait at all)."""
            with tf.control_dependencies(reduction.means):
                train_op = optimizer.apply_gradients(
                    zip(reduction.means, variables, strict=True), global_step=global_step
                )
            with tf.control_dependencies([train_op]):
                return StepReport(workers=tf.range(num_workers), losses=tf.identity(reduction.losses))

        inputs_by_step = None
        if settings.steps_per_run == 1:
            phases = reductions(model, variables)
            once = techniques.scheduled_optimizer(settings, global_step)  # one for every kind of step: the run's slots
            steps = [(first, applied(reduction, once)) for first, reduction in phases]
        else:  # k steps in one run, each reading the copies the last one updated
            built = []

            def one_step(on_step):
                ((_, reduction),) = reductions(on_step, on_step.reads.of(variables))  # one kind of step (rules.py)
                built.append(reduction)
                report = applied(reduction, techniques.scheduled_optimizer(settings, global_step))
                return report["workers"], report["losses"]

            inputs_by_step, (workers, losses) = steps_in_one_run(recipe, model, one_step, StepReads)
            phases, steps = [(0, built[0])], [(0, StepReport(workers=workers, losses=losses))]
        stash = worker_state.gathered(collectives, worker_device(task_index, settings.num_gpus))
        broadcast = collectives.broadcast(tf.global_variables())  # the optimizer's slots too: made by apply
        fingerprint = tf.placeholder(tf.int32, [1, FINGERPRINT_INTS], name="params_fingerprint")
        fingerprints = collectives.gather(fingerprint)
    buckets = (
        {"allreduce_buckets": tf.constant(phases[-1][1].buckets, tf.int64)} if settings.allreduce_bucket_mb else {}
    )
    return TrainGraph(
        model=model,
        position=global_step,
        plan=lambda step: [next(report for first, report in reversed(steps) if step >= first)],  # the latest begun
        chief_waits_for_all=False,  # every step is a collective: nobody finishes a step before the others
        counters={**microbatch_passes(settings, settings.microbatches // num_workers), **buckets},
        steps_per_run=settings.steps_per_run,
        inputs_by_step=inputs_by_step,
        initialise_on_join=lambda sess: sess.run(broadcast),
        stash=stash,
        after_last_step=lambda sess, named: _check_copies(sess, named, fingerprint, fingerprints, task_index),
    )


MODE = Mode(
    name="allreduce",
    build=build,
    workers_alone="all-reduce their gradients among themselves",
    lockstep=True,
    reduces=True,
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
