"""Deterministic synchronous SGD: lockstep steps, sharded batches, and one of two aggregations.

--aggregation=ordered: gradient slots summed in a fixed order by the chief (see aggregation.py);
repeats are bitwise at any worker count, and with --strict_determinism so are different counts.

With --pipeline_pieces, ordered aggregation's sums and updates run piece by piece, each piece pulled by every
worker as soon as it is applied, while later pieces are still pushed (graph/pipeline.py): the same bits.

--aggregation=accumulator: TensorFlow's SyncReplicasOptimizer (set up as sync_replicas.py says),
kept for comparison, with a step barrier after each step, which its tokens make safe to reuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parallel_tf.compat import tf
from parallel_tf.graph import worker_state
from parallel_tf.graph.aggregation import SlotAggregator
from parallel_tf.graph.barrier import gather_at_chief, release_workers, step_barrier
from parallel_tf.graph.model import StepReads, build_model, worker_gradients
from parallel_tf.graph.optimizers import CountingOptimizer, scheduled
from parallel_tf.graph.pipeline import Pipeline, worker_copies
from parallel_tf.graph.placement import device_setter, server_cpu, worker_device
from parallel_tf.graph.server_vectors import PackedReads, sent_packed
from parallel_tf.graph.sync_replicas import sync_replicas
from parallel_tf.training.declarations import Mode
from parallel_tf.training.modes.sync import aggregation, pipeline
from parallel_tf.training.train_graph import Phase, StepReport, TrainGraph, drive, microbatch_passes, once

if TYPE_CHECKING:
    from parallel_tf.training.settings import Settings


def build(recipe, dataset, settings):
    with tf.device(device_setter(settings.cluster, settings.task_index, settings.num_gpus)):
        model = build_model(recipe, dataset, split_over=_split_over(settings))
        global_step = tf.train.get_or_create_global_step()
        if settings.options.aggregation == "accumulator":
            return _in_arrival_order(recipe, model, global_step, settings)
        return (_pipelined if settings.options.pipeline_pieces else _in_fixed_order)(
            recipe, model, global_step, settings
        )


MODE = Mode(name="sync", build=build, lockstep=True, offers=("transmit", "optimizer"), options=(aggregation, pipeline))


def _split_over(settings):
    """The pieces large variables are cut into (graph/placement.py), for ordered aggregation: one a server, or
    --pipeline_pieces a server; 0 (whole variables) for one piece, or where a technique on needs each variable
    whole (a codec's scale, a clipping norm's sum)."""
    if settings.options.aggregation != "ordered" or settings.whole_variables:
        return 0
    pieces = settings.cluster.num_ps * max(settings.options.pipeline_pieces, 1)
    return pieces if pieces > 1 else 0


def _optimizer(settings: Settings, global_step):
    """--optimizer at the schedule's rate, as the techniques on change it (clipping)."""
    optimizer = scheduled(settings.optimizer, settings.schedule, global_step)
    for technique in settings.hooks.optimizer:
        optimizer = technique.optimizer(settings, optimizer)
    return optimizer


def _per_worker(settings):
    """The microbatches a worker computes a step: its share of --microbatches under strict determinism, else one."""
    return settings.options.microbatches // settings.num_workers if settings.options.strict_determinism else 1


def _in_fixed_order(recipe, model, global_step, settings: Settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    per_worker = _per_worker(settings)
    aggregator = SlotAggregator(tf.trainable_variables(), per_worker * num_workers)
    on_worker = worker_device(task_index, settings.num_gpus)
    is_chief = task_index == 0
    variables = aggregator.variables
    transmits = settings.hooks.transmit  # at most one (SEAMS): a technique sends each gradient its own way

    def step(model):
        """One step on `model`'s batch, its parameters read packed: (every worker's index and loss: the
        chief's report), once applied."""
        gradients = worker_gradients(recipe, model, per_worker, model.reads.of(variables))
        loss = model.loss
        if transmits:
            gradients = [
                transmits[0].transmit(settings, g, variables, on_worker, settings.random_stream) for g in gradients
            ]
        else:  # the loss rides with the gradients
            gradients, (loss,) = sent_packed(gradients, variables, riding=[loss])
        write = aggregator.write(task_index * per_worker, gradients)
        workers, losses = gather_at_chief(num_workers, task_index, loss, after=[write], name="written")
        # once every gradient is written, the chief applies the update
        if is_chief:
            done = aggregator.apply(_optimizer(settings, global_step), global_step, after=[workers])
        else:
            done = workers
        released = release_workers(num_workers, task_index, after=[done])
        with tf.device(server_cpu("ps", 0)), tf.control_dependencies([released]):
            report = tf.concat([tf.cast(workers, tf.float32), losses], 0)  # one tensor back, not two
        reported = num_workers if is_chief else 1
        return StepReport(workers=tf.cast(report[:reported], tf.int32), losses=report[reported:])

    steps = drive(settings, recipe, model, [Phase(0, step)], lambda: PackedReads(variables))
    return TrainGraph(
        model=model,
        position=global_step,  # the data position is a function of the global step
        steps=steps,
        counters=microbatch_passes(settings, per_worker),
        # the encoders' residuals, where a technique keeps state on each worker (Declaration.worker_state)
        stash=worker_state.on_server(num_workers, task_index) if settings.keeps_worker_state else None,
    )


def _pipelined(recipe, model, global_step, settings):
    """Ordered aggregation piece by piece: each step reads this worker's copies, which its pulls fill."""
    num_workers, task_index = settings.num_workers, settings.task_index
    per_worker = _per_worker(settings)
    aggregator = SlotAggregator(tf.trainable_variables(), per_worker * num_workers)
    copies = worker_copies(aggregator.variables, worker_device(task_index, settings.num_gpus))
    pipeline = Pipeline(aggregator, copies, settings.options.pipeline_pieces, num_workers, task_index)

    def step(model):
        gradients = worker_gradients(recipe, model, per_worker, model.reads.of(copies.values()))
        optimizer = _optimizer(settings, global_step) if task_index == 0 else None
        workers, losses = pipeline.step(gradients, model.loss, task_index * per_worker, optimizer, global_step)
        return StepReport(workers=workers, losses=losses)

    steps = drive(settings, recipe, model, [Phase(0, step)], lambda: StepReads(copies))
    pieces = {"pipelined_pieces": tf.constant(pipeline.pieces, tf.int64)}  # pushed and pulled a step, as built
    return TrainGraph(model, global_step, steps, counters={**microbatch_passes(settings, per_worker), **pieces})


def _in_arrival_order(recipe, model, global_step, settings):
    num_workers, task_index = settings.num_workers, settings.task_index
    is_chief = task_index == 0
    optimizer = CountingOptimizer(_optimizer(settings, global_step), "accumulator_updates", global_step)
    replicas = sync_replicas(optimizer, model.loss, global_step, num_workers, num_workers, is_chief)
    step_ops = [replicas.train_op, replicas.sync_op] if is_chief else [replicas.train_op]
    workers, losses = step_barrier(range(num_workers), task_index, model.loss, step_ops, server_cpu("ps", 0))
    return TrainGraph(
        model=model,
        position=global_step,
        steps=once(model, StepReport(workers=workers, losses=losses)),
        local_init_op=replicas.local_init_op,
        ready_for_local_init_op=replicas.ready_for_local_init_op,
        counters={"accumulator_updates": optimizer.counter},
    )
