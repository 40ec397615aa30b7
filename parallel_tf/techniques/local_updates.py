"""Downpour's local update (Dean et al., "Large Scale Distributed Deep Networks", NIPS 2012), async
mode, on by default: between fetches a worker also applies each gradient to its own copy of the
parameters, with plain SGD at the learning rate (DistBelief's client does an SGD step every
iteration), so with --fetch_every=n > 1 its n gradients are taken at n successive points instead of
at the same stale one. What it pushes, the sum of its gradients, is unchanged, and the next fetch
overwrites the copy. With --fetch_every=1 the copy is refreshed before every step: nothing to do.
--nolocal_updates gives the earlier behaviour (gradients summed at a fixed point between fetches).
"""

import dataclasses

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.devices import worker_device

MODES = ("async",)
FLAGS = ("local_updates",)
IMPLIES = {}


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_bool(
        "local_updates",
        True,
        "async: between fetches, apply each gradient to the worker's own copy with plain SGD (Downpour's "
        "local update), so the --fetch_every steps between fetches do not all compute at the same point. "
        "--nolocal_updates: sum them at the fetched point.",
        flag_values=flag_values,
    )


def enabled(options, cluster):
    return options["local_updates"]


def check(options, cluster):
    """Any value goes with any cluster."""


def build(build_mode, recipe, dataset, settings, cluster, task_index):
    """Adds the SGD step on the copies to every run that computes gradients (the dicts; a fetch is an op)."""
    graph = build_mode(recipe, dataset, settings, cluster, task_index)
    if settings.fetch_every == 1:
        return graph
    # On the worker, next to the copies; after the gradients, so the loss and gradients read the copies first.
    with tf.device(worker_device(task_index, settings.num_gpus)), tf.control_dependencies(graph.gradients):
        local_update = tf.group(
            *[c.assign_sub(settings.learning_rate * g) for c, g in zip(graph.copies, graph.gradients, strict=True)]
        )

    def plan(step):
        return [dict(run, local_update=local_update) if isinstance(run, dict) else run for run in graph.plan(step)]

    return dataclasses.replace(graph, plan=plan)
