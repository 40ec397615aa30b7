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
Python between two runs, or a straggler's pause, which is why stragglers, SSP's gate and local
updates (which write the copy in the step's run) keep the fetch at the step's start.

A push's staleness σ is the updates applied (the global step) minus those the worker's copy
reflects: the global step at its fetch, plus its own pushes where a technique keeps them in the
copy (Downpour's local updates), so σ counts only the updates the copy is missing.

What a push sends is encoded on the worker first (techniques' `transmit`); what the parameter
servers do with it (a staleness-dependent rate, a compensation, a queue) acts on what they received.

--steps_per_run=k runs k steps in one session run (graph/loops.py), each as a run of one step with
--prefetch: it reads the copies the last step fetched, pushes, and fetches for the next.

No barrier and no tokens: a worker never waits for another, so the order in which updates
reach the parameters depends on timing, and results are not repeatable.
"""

import dataclasses
import math

from parallel_tf.compat import tf
from parallel_tf.graph.devices import device_setter, worker_device
from parallel_tf.graph.exchange_steps import fetches_before, sends_after
from parallel_tf.graph.loops import StepReads, steps_in_one_run
from parallel_tf.graph.model import LOCAL, build_model_on_copies, refresh_copies
from parallel_tf.graph.pushes import GradientSum, StalenessHistogram, added_counters, push_counter
from parallel_tf.training import techniques
from parallel_tf.training.rules import Mode
from parallel_tf.training.train_graph import CopiesGraph, StepReport, own_report


@dataclasses.dataclass(frozen=True)
class AsyncGraph(CopiesGraph):
    """What techniques of async mode build on: the worker's copies and this step's gradients of them."""

    copies: tuple = ()
    gradients: tuple = ()


def build(recipe, dataset, settings):
    cluster, task_index = settings.cluster, settings.task_index
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model, pairs = build_model_on_copies(recipe, dataset, on_worker, LOCAL)
        parameters, copies = zip(*pairs, strict=True)
        global_step = tf.train.get_or_create_global_step()  # counts updates applied, by all workers
        updates = push_counter("updates_by_worker", cluster.num_workers)
        histogram = StalenessHistogram()
        with tf.device(on_worker):
            read_step = tf.Variable(tf.zeros([], tf.int64), trainable=False, collections=LOCAL, name="read_step")
            gradient_sum = GradientSum(copies, LOCAL, "gradient_sum")

        def push(gradients, copy_reflects):
            """A step's accumulation and push of its `gradients` of the copies, which reflect global step
            `copy_reflects`: (the sum's values, the Send, on_fetch, the op that pushes: the sum sent, the
            worker's push counted, the sum zeroed)."""
            with tf.device(global_step.device):  # read where it changes, just before this push changes it
                staleness = global_step.read_value() - copy_reflects
                learning_rate = techniques.push_learning_rate(settings, staleness)
            optimizer = techniques.optimizer_for(settings, learning_rate)
            with tf.device(on_worker):
                accumulate = gradient_sum.add(gradients)
            received = techniques.transmit(settings, accumulate, parameters, on_worker)
            sums, on_fetch = techniques.push_gradients(settings, parameters, received)
            recorded = histogram.record(staleness)  # before the push changes the global step
            send = techniques.send_push(settings, optimizer, sums, parameters, global_step, recorded)
            with tf.control_dependencies([send.op]):
                marked = techniques.after_push(settings, read_step)
            pushed = gradient_sum.push(tf.group(send.op, *marked) if marked else send.op, updates, task_index)
            return accumulate, send, on_fetch, pushed

        def fetch_after(after, on_fetch):
            """The copies refreshed, and the global step they reflect noted, read once ops `after` have run."""
            with tf.colocate_with(global_step), tf.control_dependencies(after):  # made here: the read waits
                step_read = global_step.read_value()
            return tf.group(refresh_copies(pairs, after), read_step.assign(step_read), *on_fetch(after))

        report = own_report(task_index, model.loss)
        inputs_by_step = None
        if settings.steps_per_run == 1:
            gradients = _gradients(model.loss, list(copies))
            accumulate, send, on_fetch, pushed = push(gradients, read_step)
            fetch = fetch_after([], on_fetch)
            by_push = {
                True: StepReport(**report, train=pushed),
                False: StepReport(**report, train=tf.group(*accumulate)),
            }
            if settings.prefetch:  # after the push is applied, on the parameter servers: no edge back first
                by_push_fetching = {
                    True: StepReport(**report, train=tf.group(pushed, fetch_after([send.op], on_fetch))),
                    False: StepReport(**report, train=fetch_after(accumulate, on_fetch)),
                }
        else:  # k steps a run, each pushing and prefetching as a run of one step with --prefetch does
            built = []

            def one_step(on_step):
                gradients = _gradients(on_step.loss, on_step.reads.of(copies))
                built[:] = gradients, *push(gradients, read_step.read_value())  # as the last step's fetch noted
                _, _, send, on_fetch, pushed = built
                with tf.control_dependencies([pushed, fetch_after([send.op], on_fetch)]):
                    return tf.constant([task_index]), tf.reshape(on_step.loss, [1])

            copy_of = {parameter.op.name: copy for parameter, copy in pairs}
            inputs_by_step, (workers, losses) = steps_in_one_run(recipe, model, one_step, lambda: StepReads(copy_of))
            gradients, _, send, on_fetch, _ = built
            fetch = fetch_after([], on_fetch)
            in_a_loop = StepReport(workers=workers, losses=losses)

    fetched = [False]  # whether this process has fetched yet: its first step must, wherever it starts

    def plan(step):
        first = not fetched[0]  # with --prefetch, every later fetch ends the run before
        runs = [fetch] if first or (fetches_before(step, settings.fetch_every) and not settings.prefetch) else []
        fetched[0] = True
        if inputs_by_step is not None:
            return [*runs, in_a_loop]
        pushes = sends_after(step, settings.push_every, settings.train_steps)
        next_fetches = step + 1 < settings.train_steps and fetches_before(step + 1, settings.fetch_every)
        runs.append((by_push_fetching if settings.prefetch and next_fetches else by_push)[pushes])
        return runs

    return AsyncGraph(
        model=model,
        # Steps whose gradients were pushed are done; a worker's unpushed sum is lost with it.
        position=tf.minimum(updates[task_index] * settings.push_every, settings.train_steps),
        plan=plan,
        counters={"updates_by_worker": updates, "staleness_histogram": histogram.nonzero(), **added_counters()},
        steps_per_run=settings.steps_per_run,
        inputs_by_step=inputs_by_step,
        initialise_on_join=send.chief_on_join if task_index == 0 else None,
        background=send.chief_background if task_index == 0 else None,
        refresh_op=fetch,
        copies=copies,
        gradients=tuple(gradients),
    )


def _gradients(loss, copies):
    """The gradients of `loss` with respect to `copies` (as read), each op's computed together before any is
    used (compute_gradients' GATE_OP): a local update writes the copy in the step's run, and must not race
    the backprop that still reads it."""
    return tf.gradients(loss, copies, gate_gradients=True)


def clock(settings):
    """(what the global step counts, the updates the run applies): one update a push, N·⌈T/n_push⌉, or with
    n-softsync one per ⌊N/n⌋ pushes (its last may take fewer)."""
    pushes = settings.num_workers * math.ceil(settings.train_steps / settings.push_every)
    n = settings.softsync
    if n:
        return "softsync updates", math.ceil(pushes / (settings.num_workers // n))
    return "pushes", pushes


MODE = Mode(name="async", build=build, clock=clock)
