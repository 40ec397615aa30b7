"""Downpour's local update (Dean et al., "Large Scale Distributed Deep Networks", NIPS 2012), async
mode, on by default: between fetches a worker also applies each gradient to its own copy of the
parameters, with plain SGD at the learning rate (DistBelief's client does an SGD step every
iteration), so with --fetch_every=n > 1 its n gradients are taken at n successive points instead of
at the same stale one. What it pushes, the sum of its gradients, is unchanged, and the next fetch
overwrites the copy. With --fetch_every=1 the copy is refreshed before every step: nothing to do,
and the technique is off. --nolocal_updates gives the earlier behaviour (gradients summed at a
fixed point between fetches).

Its own pushes are then already in the worker's copy, so they are no staleness: after each push
the update count the copy reflects (async mode's `read_step`) goes up by one, and a push's
staleness counts only the other workers' updates since the fetch (Zhang et al.'s σ). The chief
logs `local_updates_applied`, its own count.
"""

import dataclasses

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.model import LOCAL
from parallel_tf.graph.placement import worker_device
from parallel_tf.training.declarations import Flags, Technique, flag


class Options(Flags):
    local_updates: bool = flag(
        True,
        "async: between fetches, apply each gradient to the worker's own copy with plain SGD (Downpour's "
        "local update), so the --fetch_every steps between fetches do not all compute at the same point. "
        "--nolocal_updates: sum them at the fetched point.",
    )


TECHNIQUE = Technique(
    name="local_updates",
    modes=("async",),
    enabled=lambda values, cluster: values["local_updates"] and values["fetch_every"] > 1,
    named_by=("fetch_every", "local_updates"),
    hooks=("wrap", "after_push"),
    requires={
        "lr_schedule": ("constant", "a local update steps the copy at --learning_rate; give --nolocal_updates"),
        "warmup_steps": (0, "a local update steps the copy at --learning_rate; give --nolocal_updates"),
        "prefetch": (False, "a step's local update and a refresh in the same run would both write the copy"),
    },
    conflicts={
        "softsync": "softsync folds floor(N/n) pushes into one update, so a worker's own push is no whole update "
        "its copy holds and staleness cannot be counted; give --nolocal_updates or --fetch_every=1"
    },
    options=Options,
)


def after_push(settings, read_step):
    """The push just sent is in this worker's copy already: the copy reflects one more update."""
    return [read_step.assign_add(1)]


def wrap(settings, graph):
    """Adds the SGD step on the copies to every run that computes gradients (the dicts; a fetch is an op)."""
    # On the worker, next to the copies; after the gradients, so the loss and gradients read the copies first.
    with tf.device(worker_device(settings.task_index, settings.num_gpus)):
        applied = tf.Variable(tf.zeros([], tf.int64), trainable=False, collections=LOCAL, name="local_updates_applied")
        with tf.control_dependencies(graph.gradients):
            local_update = tf.group(
                applied.assign_add(1),
                *[c.assign_sub(settings.base_learning_rate * g) for c, g in zip_strict(graph.copies, graph.gradients)],
            )

    def plan(step):
        return [dict(run, local_update=local_update) if isinstance(run, dict) else run for run in graph.runs(step)]

    return dataclasses.replace(
        graph,
        plan=plan,
        counters={**graph.counters, "local_updates_applied": applied},
    )
