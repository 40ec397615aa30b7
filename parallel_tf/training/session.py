"""A worker's session on the cluster: joining it (the chief initialising or restoring the model, the others waiting
for it), and the graph's background work while it trains."""

import threading

from parallel_tf.compat import tf
from parallel_tf.errors import chief_did_not_initialise
from parallel_tf.graph import placement
from parallel_tf.training import devices

# How often a worker that joined before the chief initialised the model asks again. Each ask is one
# session on the cluster; at 0.5 s a joining worker idled most of a second (in-process clusters: 0.19 s
# a run saved at 0.1, medians of 2 interleaved runs of the 21 composition pairs, 28.5 vs 24.6 s; 0.02
# saved 13-18% more, 12 pairs twice interleaved, 4.38 and 4.68 s at 0.1 against 3.81 and 3.84 s).
JOIN_POLL_SECS = 0.02


def join(graph, train_graph, settings, checkpoints, target):
    """(A session on the cluster, whether it rejoined a running one). The chief (worker 0) initialises
    the shared parameters, or restores them from its latest checkpoint; a graph may initialise more of
    its own (a group chief's local ps). The others wait until the model is ready. A chief restarted
    while its parameter servers kept running finds the model ready and rejoins it as it is: those
    servers hold training that is newer than any checkpoint, and the other workers are using it."""
    manager = tf.train.SessionManager(
        local_init_op=train_graph.local_init_op,
        ready_op=train_graph.ready_op,
        ready_for_local_init_op=train_graph.ready_for_local_init_op,
        graph=graph,
        recovery_wait_secs=JOIN_POLL_SECS,
    )
    filters = placement.worker_device_filters(settings.cluster, settings.task_index) if settings.cluster else None
    config = devices.session_config(filters, settings.operation_timeout)
    initialisers = [checkpoints.restore] if checkpoints else []
    if train_graph.initialise_on_join:
        initialisers.append(train_graph.initialise_on_join)
    if not initialisers:
        try:
            return manager.wait_for_session(target, config=config, max_wait_secs=settings.startup_timeout), False
        except tf.errors.DeadlineExceededError:
            raise chief_did_not_initialise(settings.startup_timeout) from None

    if settings.cluster:
        try:  # restarted alone (its pod, by a cluster manager): the servers still hold the live model
            return manager.wait_for_session(target, config=config, max_wait_secs=0), True
        except tf.errors.DeadlineExceededError:
            pass  # not initialised yet: a new or restarted cluster, which this task initialises

    def init_fn(sess):
        for initialise in initialisers:
            initialise(sess)

    init_op = checkpoints.init_op if checkpoints else None
    return manager.prepare_session(target, init_op=init_op, init_fn=init_fn, config=config), False


class Background:
    """A graph's background work (`TrainGraph.background`) in a thread; `wait()` returns once it has
    finished, and raises what it raised, so a task never closes its session under it."""

    def __init__(self, work, sess):
        self._error = None
        self._thread = None
        if work:
            self._thread = threading.Thread(target=self._run, args=(work, sess), name="background", daemon=True)
            self._thread.start()

    def _run(self, work, sess):
        try:
            work(sess)
        except Exception as e:  # handed to the main thread by wait()
            self._error = e

    def wait(self):
        if self._thread:
            self._thread.join()
        if self._error:
            raise self._error
