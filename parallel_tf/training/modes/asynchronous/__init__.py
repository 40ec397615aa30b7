"""Asynchronous SGD in the Downpour style of DistBelief: every worker trains at its own pace.

Worker i computes gradients on slice i of each global batch against its own copy of the
parameters, adds them to a local sum, and every --push_every steps sends the sum to the
parameter servers, which apply it with the optimizer (Adagrad there, as in DistBelief, works).
Every --fetch_every steps, before the step, it refreshes its copy from the parameter servers.
With both at 1 (the default) this is plain async SGD: read, compute, apply. A process's first
step always fetches, so a resumed worker never computes on a copy it has not read.

--prefetch (the default) does a step's fetch at the end of the previous step's session run, once
that step's push is applied on the parameter servers, so a step is one run instead of two (each
run costs rounds of RPCs). The worker reads the same parameters it would have read at the start
of its next step, but for the other workers' pushes applied in between: a few milliseconds of
Python between two runs, or a straggler's pause, which is why stragglers and local updates (which write
the copy in the step's run) keep the fetch at the step's start. SSP's gate of a step comes after the push
of the step before (a technique's after_push), and the fetch after it, wherever the fetch is.

A push's staleness σ is the updates applied (the global step) minus those the worker's copy
reflects: the global step at its fetch, plus its own pushes where a technique keeps them in the
copy (Downpour's local updates), so σ counts only the updates the copy is missing.

What a push sends is encoded on the worker first (techniques' `transmit`); what the parameter
servers do with it (a staleness-dependent rate, a compensation, a queue) acts on what they received.

Where every step pushes and prefetches (the default), the steps are all alike: one is built for the driver
(train_graph.drive), which runs it once a session run or k times in one: each reads the copies the last step
fetched, pushes, and fetches for the next, the run's last too (one fetch more than the training needs). Other
intervals make steps of several kinds, a run each (intervals.py), and the training's last step does not
fetch.

No barrier and no tokens: a worker never waits for another, so the order in which updates
reach the parameters depends on timing, and results are not repeatable.
"""

import dataclasses
import math

from parallel_tf.compat import tf
from parallel_tf.graph.model import LOCAL, StepReads, build_model_on_copies
from parallel_tf.graph.placement import device_setter, worker_device
from parallel_tf.training.declarations import Mode
from parallel_tf.training.modes.asynchronous import fetch_every, intervals, prefetch, push_every
from parallel_tf.training.modes.asynchronous.pushes import Pushes
from parallel_tf.training.train_graph import CopiesGraph, Phase, drive, own_report


@dataclasses.dataclass(frozen=True)
class AsyncGraph(CopiesGraph):
    """What techniques of async mode build on: the worker's copies and this step's gradients of them."""

    copies: tuple = ()
    gradients: tuple = ()


def build(recipe, dataset, settings):
    task_index = settings.task_index
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(device_setter(settings.cluster, task_index, settings.num_gpus)):
        model, pairs = build_model_on_copies(recipe, dataset, on_worker, LOCAL)
        pushes = Pushes(settings, pairs, on_worker)
        if _every_step_alike(settings.options):
            built = _one_kind_of_step(recipe, model, settings, pushes)
        else:  # runs of one step, each its kind: a run's last step does not fetch, nor one before a step that
            # fetches at its start, and a push may wait n steps
            gradients = _gradients(model.loss, list(pushes.copies))
            built = intervals.stepwise(model, settings, gradients, pushes)
    fetched = [False]  # whether this process has fetched yet: its first step must, wherever it starts

    def plan(step):
        """The step's runs, the first this process trains with a fetch before, wherever it starts."""
        first, fetched[0] = not fetched[0], True
        return built.plan(step, first)

    send = pushes.send
    assert send is not None, "the step pushes"
    return AsyncGraph(
        model=model,
        # Steps whose gradients were pushed are done; a worker's unpushed sum is lost with it.
        position=tf.minimum(pushes.updates[task_index] * settings.options.push_every, settings.train_steps),
        steps=built.steps,
        plan=plan,
        counters={
            "updates_by_worker": pushes.updates,
            "staleness_histogram": pushes.histogram.nonzero(),
        },
        initialise_on_join=send.chief_on_join if task_index == 0 else None,
        background=send.chief_background if task_index == 0 else None,
        refresh_op=built.fetch,
        copies=pushes.copies,
        gradients=tuple(built.gradients),
    )


def _every_step_alike(options):
    """Whether every step pushes, and fetches for the next at its end (the defaults): one kind of step."""
    return options.push_every == options.fetch_every == 1 and options.prefetch


def _one_kind_of_step(recipe, model, settings, pushes):
    """The Stepwise of a worker whose steps are all alike: one step, which the driver builds."""
    copy_of = {parameter.op.name: copy for parameter, copy in pushes.pairs}

    def step(on_step):
        """A push of the step's gradients, then the next step's fetch, once it is applied (on the parameter
        servers: no edge back first); the worker's index and loss once both are done."""
        gradients = _gradients(on_step.loss, on_step.reads.of(pushes.copies))
        _, pushed = pushes.push(gradients, pushes.read_step.read_value())  # as the last fetch noted
        with tf.control_dependencies([pushed, pushes.fetch_after([pushes.sent])]):
            return own_report(settings.task_index, on_step.loss)

    steps = drive(settings, recipe, model, [Phase(0, step)], lambda: StepReads(copy_of))
    fetch = pushes.fetch_after([])
    return intervals.Stepwise(steps, lambda step, first: [fetch] * first + [steps.report(step)], [], fetch)


def _gradients(loss, copies):
    """The gradients of `loss` with respect to `copies` (as read), each op's computed together before any is
    used (compute_gradients' GATE_OP): a local update writes the copy in the step's run, and must not race
    the backprop that still reads it."""
    return tf.gradients(loss, copies, gate_gradients=True)


def clock(settings):
    """(what the global step counts, the updates the run applies): one update a push, N·⌈T/n_push⌉, or with
    n-softsync one per ⌊N/n⌋ pushes (its last may take fewer)."""
    pushes = settings.num_workers * math.ceil(settings.train_steps / settings.options.push_every)
    n = settings.options.softsync
    if n:
        return "softsync updates", math.ceil(pushes / (settings.num_workers // n))
    return "pushes", pushes


MODE = Mode(
    name="async",
    build=build,
    clock=clock,
    offers=("transmit", "optimizer", "push_learning_rate", "push_gradients", "send_push", "after_push"),
    options=(push_every, fetch_every, prefetch),
)
