"""An async worker's state and its two exchanges with the parameter servers: a push of its gradient sum and
a fetch of the parameters into its copies (asynchronous.py's steps are made of them)."""

from parallel_tf.compat import tf
from parallel_tf.graph.model import LOCAL, refresh_copies
from parallel_tf.graph.pushes import GradientSum, StalenessHistogram, push_counter
from parallel_tf.training import techniques


class Pushes:
    """Made once a worker, in the graph's device scope: the global step, the pushes each worker made, the
    staleness histogram, and on the worker its gradient sum and `read_step`, the global step its copies reflect.
    A worker builds its push once (in a loop of steps, once inside it); `send`, `sent` and `on_fetch` are then its
    push's: the Send with its chief's hooks, the op a fetch after the push waits for (the send, and what the
    techniques do once it is sent: SSP's gate of the next step), and the ops its fetches run besides refreshing
    the copies."""

    def __init__(self, settings, pairs, on_worker):
        self.settings, self.pairs, self.on_worker = settings, pairs, on_worker
        self.parameters, self.copies = zip(*pairs, strict=True)
        self.global_step = tf.train.get_or_create_global_step()  # counts updates applied, by all workers
        self.updates = push_counter("updates_by_worker", settings.cluster.num_workers)
        self.histogram = StalenessHistogram()
        with tf.device(on_worker):
            self.read_step = tf.Variable(tf.zeros([], tf.int64), trainable=False, collections=LOCAL, name="read_step")
            self.gradient_sum = GradientSum(self.copies, LOCAL, "gradient_sum")

    send = None
    sent = None
    on_fetch = None

    def push(self, gradients, copy_reflects):
        """A step's accumulation and push of its `gradients` of the copies, which reflect global step
        `copy_reflects`: (the sum's values, the op that pushes: the sum sent, the worker's push counted, the sum
        zeroed)."""
        assert self.send is None, "a worker builds its push once"
        settings, global_step = self.settings, self.global_step
        with tf.device(global_step.device):  # read where it changes, just before this push changes it
            staleness = global_step.read_value() - copy_reflects
            learning_rate = techniques.push_learning_rate(settings, staleness)
        optimizer = techniques.optimizer_for(settings, learning_rate)
        with tf.device(self.on_worker):
            accumulate = self.gradient_sum.add(gradients)
        received = techniques.transmit(settings, accumulate, self.parameters, self.on_worker)
        sums, on_fetch = techniques.push_gradients(settings, self.parameters, received)
        recorded = self.histogram.record(staleness)  # before the push changes the global step
        send = techniques.send_push(settings, optimizer, sums, self.parameters, global_step, recorded)
        with tf.control_dependencies([send.op]):
            marked = techniques.after_push(settings, self.read_step)
        sent = tf.group(send.op, *marked) if marked else send.op
        self.send, self.sent, self.on_fetch = send, sent, on_fetch
        return accumulate, self.gradient_sum.push(sent, self.updates, settings.task_index)

    def fetch_after(self, after):
        """The copies refreshed, and the global step they reflect noted, read once ops `after` have run."""
        with tf.colocate_with(self.global_step), tf.control_dependencies(after):  # made here: the read waits
            step_read = self.global_step.read_value()
        return tf.group(refresh_copies(self.pairs, after), self.read_step.assign(step_read), *self.on_fetch(after))
