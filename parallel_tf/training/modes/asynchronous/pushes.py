"""An async worker's state and its two exchanges with the parameter servers: a push of its gradient sum and
a fetch of the parameters into its copies (asynchronous.py's steps are made of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.model import LOCAL, refresh_copies
from parallel_tf.graph.optimizers import apply_then_step, optimizer_at
from parallel_tf.graph.pushes import GradientSum, Send, StalenessHistogram, push_counter

if TYPE_CHECKING:
    from parallel_tf.training.settings import Settings


class Pushes:
    """Made once a worker, in the graph's device scope: the global step, the pushes each worker made, the
    staleness histogram, and on the worker its gradient sum and `read_step`, the global step its copies reflect.
    A worker builds its push once (in a loop of steps, once inside it); `send`, `sent` and `on_fetch` are then its
    push's: the Send with its chief's hooks, the op a fetch after the push waits for (the send, and what the
    techniques do once it is sent: SSP's gate of the next step), and the ops its fetches run besides refreshing
    the copies."""

    def __init__(self, settings: Settings, pairs, on_worker):
        self.settings, self.pairs, self.on_worker = settings, pairs, on_worker
        self.parameters, self.copies = zip_strict(*pairs)
        self.global_step = tf.train.get_or_create_global_step()  # counts updates applied, by all workers
        self.updates = push_counter("updates_by_worker", settings.num_workers)
        self.histogram = StalenessHistogram()
        with tf.device(on_worker):
            self.read_step = tf.Variable(tf.zeros([], tf.int64), trainable=False, collections=LOCAL, name="read_step")
            self.gradient_sum = GradientSum(self.copies, LOCAL, "gradient_sum")

    send: Send | None = None
    sent = None
    on_fetch: Callable | None = None

    def push(self, gradients, copy_reflects):
        """A step's accumulation and push of its `gradients` of the copies, which reflect global step
        `copy_reflects`: (the sum's values, the op that pushes: the sum sent, the worker's push counted, the sum
        zeroed)."""
        assert self.send is None, "a worker builds its push once"
        settings, global_step = self.settings, self.global_step
        with tf.device(global_step.device):  # read where it changes, just before this push changes it
            staleness = global_step.read_value() - copy_reflects
            learning_rate = self._learning_rate(staleness)
        optimizer = self._optimizer(learning_rate)
        with tf.device(self.on_worker):
            accumulate = self.gradient_sum.add(gradients)
        received = accumulate
        for technique in settings.hooks.transmit:  # at most one (SEAMS): a technique encodes it on the way
            received = technique.transmit(settings, accumulate, self.parameters, self.on_worker, settings.random_stream)
        sums, on_fetch = self._applied(received)
        recorded = self.histogram.record(staleness)  # before the push changes the global step
        send = self._send(optimizer, sums, after=recorded)
        with tf.control_dependencies([send.op]):
            marked = [
                op for technique in settings.hooks.after_push for op in technique.after_push(settings, self.read_step)
            ]
        sent = tf.group(send.op, *marked) if marked else send.op
        self.send, self.sent, self.on_fetch = send, sent, on_fetch
        return accumulate, self.gradient_sum.push(sent, self.updates, settings.task_index)

    def _learning_rate(self, staleness):
        """The rate a push of `staleness` is applied with: the schedule's at the global step it is applied at, unless
        a technique makes it depend on the staleness."""
        learning_rate = self.settings.schedule.at(self.global_step)
        for technique in self.settings.hooks.push_learning_rate:
            learning_rate = technique.push_learning_rate(self.settings, learning_rate, staleness)
        return learning_rate

    def _optimizer(self, learning_rate):
        """--optimizer at `learning_rate`, as the techniques on change how it applies updates (clipping)."""
        optimizer = optimizer_at(self.settings.optimizer, learning_rate, self.global_step)
        for technique in self.settings.hooks.optimizer:
            optimizer = technique.optimizer(self.settings, optimizer)
        return optimizer

    def _applied(self, received):
        """(What the push applies to the parameters instead of the `received` sums, on_fetch(after): the ops a fetch
        runs besides refreshing the copies, once ops `after` have run). Unless a technique changes them: the sums,
        and no ops."""
        sums, on_fetch = received, []
        for technique in self.settings.hooks.push_gradients:
            sums, more = technique.push_gradients(self.settings, self.parameters, sums)
            on_fetch.append(more)
        return sums, lambda after: [op for ops_after in on_fetch for op in ops_after(after)]

    def _send(self, optimizer, sums, after):
        """The push, once op `after` has run: `optimizer` applies `sums` to the parameters at once, unless a
        technique sends them otherwise (softsync), given the run's optimizer for a push of any staleness."""
        for technique in self.settings.hooks.send_push:  # at most one (declarations.SEAMS)

            def optimizer_at_staleness(staleness):
                return self._optimizer(self._learning_rate(staleness))

            return technique.send_push(
                self.settings, optimizer, sums, self.parameters, self.global_step, after, optimizer_at_staleness
            )
        with tf.control_dependencies([after]):
            return Send(apply_then_step(optimizer, zip_strict(sums, self.parameters), self.global_step))

    def fetch_after(self, after):
        """The copies refreshed, and the global step they reflect noted, read once ops `after` have run."""
        assert self.on_fetch is not None, "a worker builds its push before the fetches after it"
        with tf.colocate_with(self.global_step), tf.control_dependencies(after):  # made here: the read waits
            step_read = self.global_step.read_value()
        return tf.group(refresh_copies(self.pairs, after), self.read_step.assign(step_read), *self.on_fetch(after))
