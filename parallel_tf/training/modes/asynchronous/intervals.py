"""Async steps that are not all alike (--push_every=n, --fetch_every=m, --noprefetch): a run of one step each,
of the kind its step asks for: gradients added to the worker's sum, or added and pushed; and the copies fetched
before the step, or (--prefetch) at the end of the run before it, once that run's push is applied on the
parameter servers. The steps of asynchronous.py's loop are the kind where every step pushes and prefetches."""

import dataclasses

from parallel_tf.compat import tf
from parallel_tf.graph.exchange_steps import fetches_before, sends_after
from parallel_tf.training.train_graph import StepReport, Steps, once, own_report


@dataclasses.dataclass(frozen=True)
class Stepwise:
    steps: Steps
    plan: object  # (step, first: whether it is the process's first) -> the runs of that step: a fetch first where
    # it fetches, then its kind of step
    gradients: list  # the step's gradients of the copies (local updates apply them to the copies)
    fetch: object  # a fetch of the copies on its own: the first step's, wherever a worker starts


def stepwise(model, settings, gradients, pushes):
    """The Stepwise of a worker: each kind of step built once, on `model` and its `gradients` of the copies, by
    the worker's `pushes` (pushes.Pushes)."""
    accumulate, pushed = pushes.push(gradients, pushes.read_step)
    report = own_report(settings.task_index, model.loss)
    by_push = {True: StepReport(**report, train=pushed), False: StepReport(**report, train=tf.group(*accumulate))}
    fetching = {  # after the push is applied, on the parameter servers: no edge back first
        True: StepReport(**report, train=tf.group(pushed, pushes.fetch_after([pushes.sent]))),
        False: StepReport(**report, train=pushes.fetch_after(accumulate)),
    }
    fetch = pushes.fetch_after([])

    def plan(step, first):
        runs = (
            [fetch]
            if first or (fetches_before(step, settings.options.fetch_every) and not settings.options.prefetch)
            else []
        )
        pushes_now = sends_after(step, settings.options.push_every, settings.train_steps)
        next_fetches = step + 1 < settings.train_steps and fetches_before(step + 1, settings.options.fetch_every)
        return [*runs, (fetching if settings.options.prefetch and next_fetches else by_push)[pushes_now]]

    return Stepwise(once(model, by_push[True]), plan, gradients, fetch)
