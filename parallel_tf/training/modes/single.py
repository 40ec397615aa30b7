"""The reference: the same model, data order and optimizer in one plain process, no cluster.

A 1-worker sync cluster must train bitwise the same parameters as this; tests check it. With
--steps_per_run=k it trains k steps a session run as the clusters do (graph/loops.py), so a cluster's
loop is compared with a reference that has one too.
"""

from parallel_tf.compat import tf
from parallel_tf.graph.loops import StepReads, steps_in_one_run
from parallel_tf.graph.model import build_model, make_optimizer
from parallel_tf.training.rules import NO_CLUSTER, Mode
from parallel_tf.training.train_graph import StepReport, TrainGraph, fixed_plan


def build(recipe, dataset, settings):
    model = build_model(recipe, dataset)
    global_step = tf.train.get_or_create_global_step()
    variables = tf.trainable_variables()

    def step(model, gradients):
        """(this worker, its loss) once `gradients` of the model's variables are applied: every one computed
        before any update, which would otherwise race the backprop still reading the variable it writes."""
        optimizer = make_optimizer(settings.optimizer, settings.schedule.at(global_step))
        with tf.control_dependencies(gradients):
            train_op = optimizer.apply_gradients(zip(gradients, variables, strict=True), global_step=global_step)
        with tf.control_dependencies([train_op]):
            return tf.constant([0]), tf.reshape(model.loss, [1])

    inputs_by_step = None
    if settings.steps_per_run == 1:
        workers, losses = step(model, tf.gradients(model.loss, variables))
    else:  # each step's gradients are taken with respect to its own reads
        inputs_by_step, (workers, losses) = steps_in_one_run(
            recipe,
            model,
            lambda on_step: step(on_step, tf.gradients(on_step.loss, on_step.reads.of(variables))),
            StepReads,
        )
    return TrainGraph(
        model=model,
        position=global_step,
        plan=fixed_plan(StepReport(workers=workers, losses=losses)),
        steps_per_run=settings.steps_per_run,
        inputs_by_step=inputs_by_step,
    )


MODE = Mode(name=NO_CLUSTER, build=build, cluster=False)
