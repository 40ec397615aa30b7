"""State a worker keeps for itself across steps (error feedback's residuals, PowerSGD's errors), which a resume
needs as much as the parameters: without it a resumed run starts it at zero and ends on other bits.

Each such variable is a local one (each worker its own), declared with `keep`. A mode that promises bitwise
resumes copies them, after every step the chief checkpoints, into slots the chief saves: global variables,
one per worker and kept variable, which every worker's graph names alike; every worker sets its own from
its slots as it joins (zeros on a fresh start, restored values on a resume). With parameter servers the
slots are on the first one and each worker writes its own, telling the chief, who saves once all have
(`on_server`); in all-reduce every worker holds every slot, filled by an all-gather all of them make at the
same steps, and the chief's are the ones saved, restored and broadcast (`gathered`). So a resume needs the
worker count it stopped with (logdir.run_identity records it).
"""

from __future__ import annotations  # the tf.Operation annotations below must not import TensorFlow

import dataclasses
from collections.abc import Callable

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.barrier import gather_at_chief
from parallel_tf.graph.collectives import pack
from parallel_tf.graph.placement import server_cpu

KEPT = "parallel_tf_worker_state"  # graph collection: the local variables a resume needs


def keep(variable):
    """`variable`, a local variable of this worker, declared as state a resume needs."""
    tf.add_to_collection(KEPT, variable)
    return variable


@dataclasses.dataclass(frozen=True)
class Stash:
    copy: tf.Operation  # run by every worker after a step the chief checkpoints; the chief's, once all have
    # () -> the op that sets a worker's kept variables from its slots, made where it must wait (its local init)
    restore: Callable[[], tf.Operation]


def on_server(num_workers, task_index):
    """The stash of a parameter-server mode: slots on ps 0; None where nothing is kept."""
    kept = tf.get_collection(KEPT)
    if not kept:
        return None
    slots = _slots(kept, num_workers, server_cpu("ps", 0))
    copies = [slot[task_index].assign(variable) for variable, slot in zip_strict(kept, slots)]
    _, told = gather_at_chief(num_workers, task_index, 0.0, after=copies, name="worker_state_copied")
    return Stash(copy=tf.group(told), restore=lambda: _restore(kept, slots, task_index))


def gathered(collectives, device):
    """The stash of all-reduce: every slot on every worker's `device`, filled from one all-gather of every
    worker's kept variables; None where nothing is kept."""
    kept = tf.get_collection(KEPT)
    if not kept:
        return None
    slots = _slots(kept, collectives.num_workers, device)
    flat, unpack = pack([variable.read_value() for variable in kept])
    everyone = tf.reshape(collectives.gather(flat[None]), [collectives.num_workers, -1])
    copies = [
        slot[worker].assign(value)
        for worker in range(collectives.num_workers)
        for slot, value in zip_strict(slots, unpack(everyone[worker]))
    ]
    return Stash(copy=tf.group(*copies), restore=lambda: _restore(kept, slots, collectives.task_index))


def _slots(kept, num_workers, device):
    """[[worker 0's slot, ...] of each kept variable], global and not trainable, starting at zero."""
    with tf.device(device):
        return [
            [
                tf.Variable(
                    tf.zeros(variable.shape, variable.dtype.base_dtype),
                    trainable=False,
                    name=f"worker_state/{variable.op.name}/worker_{worker}",
                )
                for worker in range(num_workers)
            ]
            for variable in kept
        ]


def _restore(kept, slots, task_index):
    return tf.group(*[variable.assign(slot[task_index]) for variable, slot in zip_strict(kept, slots)])
