"""One builder per mode, same signature, same return type, so `task.py` has one training loop.

build(model_fn, dataset, settings, cluster, task_index) -> TrainGraph
"""

import dataclasses

# Importable without TensorFlow: the launcher needs the names, not the builders.
MODES = ("sync",)


@dataclasses.dataclass(frozen=True)
class TrainGraph:
    """What a worker needs to train, whatever the mode."""

    model: object  # graph.ModelGraph
    global_step: object  # tf.Variable
    step: dict  # fetched once per step: {"workers": int32[N], "losses": float32[N]}, train op inside
    init_op: object  # run by the chief on a fresh start
    ready_op: object  # a tensor, empty once everything this worker uses is initialised
    local_init_op: object = None
    ready_for_local_init_op: object = None
    finish_op: object = None  # run by each worker when done, so parameter servers can exit
    device_filters: tuple = ()  # the tasks this worker talks to


def builder(mode):
    """The build function for `mode`; 'single' is the one-process reference run."""
    from parallel_tf.modes import single, sync

    return {"single": single.build, "sync": sync.build}[mode]
