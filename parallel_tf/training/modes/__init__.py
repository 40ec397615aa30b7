"""One builder per mode: build(recipe, dataset, settings, cluster, task_index) -> TrainGraph
(train_graph.py), wrapped by the techniques a run's settings switch on (techniques/)."""

from parallel_tf.training import techniques
from parallel_tf.training.modes import allreduce, asynchronous, hierarchical, single, sync


def builder(mode):
    """The build function for `mode` ('single' is the one-process reference), wrapped by the
    techniques its settings switch on (see techniques/)."""
    build_mode = {
        "single": single.build,
        "sync": sync.build,
        "async": asynchronous.build,
        "hierarchical": hierarchical.build,
        "allreduce": allreduce.build,
    }[mode]
    return techniques.wrap(build_mode)
