"""One builder per mode, same signature, same return type, so `task.py` has one training loop.

    build(model_fn, dataset, settings, cluster, task_index) -> TrainGraph
"""

import dataclasses

from parallel_tf.compat import tf


@dataclasses.dataclass(frozen=True)
class TrainGraph:
    """What a worker needs to train, whatever the mode."""

    model: object  # graph.ModelGraph
    global_step: tf.Variable
    step: dict  # fetched once per step: {"workers": int32[N], "losses": float32[N]}, train op inside
    init_op: tf.Operation  # run by the chief on a fresh start
    ready_op: tf.Tensor  # empty once everything this worker uses is initialised
    local_init_op: tf.Operation = None
    ready_for_local_init_op: tf.Tensor = None
    finish_op: tf.Operation = None  # run by each worker when done, so parameter servers can exit
    device_filters: tuple = ()  # the tasks this worker talks to


def builder(mode):
    """The build function for `mode`; 'single' is the one-process reference run."""
    from parallel_tf.modes import single, sync

    return {"single": single.build, "sync": sync.build}[mode]
