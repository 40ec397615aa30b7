"""The reference: the same model, data order and optimizer in one plain process, no cluster.

A 1-worker sync cluster must train bitwise the same parameters as this; tests check it.
"""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.model import StepReads, build_model
from parallel_tf.graph.optimizers import make_optimizer
from parallel_tf.training.declarations import NO_CLUSTER, Mode
from parallel_tf.training.train_graph import Phase, StepReport, TrainGraph, drive


def build(recipe, dataset, settings):
    model = build_model(recipe, dataset)
    global_step = tf.train.get_or_create_global_step()
    variables = tf.trainable_variables()

    def step(on_step):
        """This process's index and loss once the step's gradients are applied: every one computed before any
        update, which would otherwise race the backprop still reading the variable it writes."""
        gradients = tf.gradients(on_step.loss, on_step.reads.of(variables))
        optimizer = make_optimizer(settings.optimizer, settings.schedule.at(global_step))
        with tf.control_dependencies(gradients):
            train_op = optimizer.apply_gradients(zip_strict(gradients, variables), global_step=global_step)
        with tf.control_dependencies([train_op]):
            return StepReport(workers=tf.constant([0]), losses=tf.reshape(on_step.loss, [1]))

    steps = drive(settings, recipe, model, [Phase(0, step)], StepReads)
    return TrainGraph(model=model, position=global_step, steps=steps)


MODE = Mode(name=NO_CLUSTER, build=build, cluster=False)
