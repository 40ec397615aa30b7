"""The reference: the same model, data order and optimizer in one plain process, no cluster.

A 1-worker sync cluster must train bitwise the same parameters as this; tests check it.
"""

from parallel_tf.compat import tf
from parallel_tf.graph.model import build_model, make_optimizer
from parallel_tf.training.rules import NO_CLUSTER, Mode
from parallel_tf.training.train_graph import StepReport, TrainGraph, fixed_plan


def build(recipe, dataset, settings):
    model = build_model(recipe, dataset)
    global_step = tf.train.get_or_create_global_step()
    optimizer = make_optimizer(settings.optimizer, settings.schedule.at(global_step))
    train_op = optimizer.minimize(model.loss, global_step=global_step)
    with tf.control_dependencies([train_op]):
        losses = tf.reshape(model.loss, [1])
    return TrainGraph(
        model=model,
        position=global_step,
        plan=fixed_plan(StepReport(workers=tf.constant([0]), losses=losses)),
    )


MODE = Mode(name=NO_CLUSTER, build=build, cluster=False)
