"""Cross-process synchronisation from shared queues on the parameter servers.

A `threading.Barrier` only works inside one process; these work across processes because every
worker's graph names the same queues (`shared_name`) on the same server device.

The step barrier: each member puts (its index, its shard loss) into every member's queue, then
takes as many items from its own. Nobody passes step t until all members have reached it, and
the chief receives every member's loss on the way, so it can log the batch's loss without
another pass. Sync mode uses it over all workers on ps 0; hierarchical mode over each group on
its local ps.

A step barrier is only safe to reuse step after step if no member can arrive at step t+1
before every member has left step t. SyncReplicasOptimizer's tokens see to that in the sync
accumulator and hierarchical modes. Ordered aggregation has no tokens, so it uses a gather at
the chief (each worker sends its loss once its gradients are written) and a release (the chief,
once it has applied the update, puts one token in each worker's own queue): every queue has one
reader and one step's item at a time. The same gather tells the chief when async workers and
hierarchical groups, which finish at different times, have all run their last step.

The done signal (TF issue #4713): each worker puts its index into a queue on every server it
uses when it has finished; a server exits once it has heard from all of its workers. A worker
that stops answering before it has signalled is lost: the server gives up (exit 1) rather than
wait forever, unless the run has backup workers to spare.
"""

import time

from parallel_tf.compat import tf
from parallel_tf.graph.placement import server_cpu

LIVENESS_POLL_SECS = 0.5
# How often a server looks for done signals: it exits this soon after the last (a look is one local run; a
# dequeue that blocks with a deadline could take a signal and lose it to the deadline)
SIGNAL_POLL_SECS = 0.05


def shared_queue(name, device, dtypes, shapes):
    with tf.device(device):
        return tf.FIFOQueue(-1, dtypes, shapes=shapes, shared_name=name, name=name)


def constant_at(value, device):
    """A constant made where the queue op that takes it runs, and before any control dependency: made
    inside one, on the worker, it would cost a round trip (server to worker and back) in each step.
    In a loop of steps (train_graph.drive) it is made outside the loop as well, and entered into it by an
    op made where the queue ops that take it are made: on `device` too."""
    with tf.control_dependencies(None), tf.device(device):
        return tf.constant(value, tf.int32)


def taken(queue, count, number):
    """`number` items taken from `queue` (`count`, the same as a tensor made where the queue is), their
    shapes known: a count that enters a loop (train_graph.drive) is no constant to infer them from."""
    items = queue.dequeue_many(count)
    for item in items:
        item.set_shape([number])
    return items


def _done_queue(job, task):
    return shared_queue(f"parallel_tf_done_{job}_{task}", server_cpu(job, task), [tf.int32], [[]])


def step_barrier(members, worker_index, loss, after, device):
    """Returns (worker indices, losses) of all `members`, ready once each has run its `after` ops."""
    queues = {
        member: shared_queue(f"parallel_tf_barrier_{member}", device, [tf.int32, tf.float32], [[], []])
        for member in members
    }
    index, count = constant_at(worker_index, device), constant_at(len(members), device)
    with tf.device(device), tf.control_dependencies(after):
        arrivals = [queue.enqueue((index, loss)) for queue in queues.values()]
    with tf.device(device), tf.control_dependencies(arrivals):
        return taken(queues[worker_index], count, len(members))


def gather_at_chief(num_workers, worker_index, value, after, name):
    """Each worker sends (its index, `value`) to the chief once it has run `after` (ops).

    Returns, for the chief, every worker's (index, value) once all N have sent; for the others,
    their own, without waiting. The queue has one reader, the chief, so it is safe to use every
    step as long as no worker can send twice before the chief has read a round: see release_workers.
    """
    device = server_cpu("ps", 0)
    queue = shared_queue(f"parallel_tf_{name}", device, [tf.int32, tf.float32], [[], []])
    index, count = constant_at(worker_index, device), constant_at(num_workers, device)
    with tf.device(device), tf.control_dependencies(after):
        sent = queue.enqueue((index, value))
    with tf.device(device), tf.control_dependencies([sent]):  # on the ps, where the step's report is made
        if worker_index == 0:
            return taken(queue, count, num_workers)
        return tf.constant([worker_index]), tf.reshape(tf.identity(value), [1])


def release_workers(num_workers, worker_index, after):
    """The chief, once it has run `after`, lets every other worker go on; they wait here until it does.

    One queue per worker, one token per step: a worker cannot take a later step's token early.
    """
    device = server_cpu("ps", 0)
    queues = [shared_queue(f"parallel_tf_release_{w}", device, [tf.int32], [[]]) for w in range(num_workers)]
    token = constant_at(0, device)
    with tf.device(device), tf.control_dependencies(after):
        if worker_index == 0:
            return tf.group(*[queue.enqueue(token) for queue in queues[1:]])
        return queues[worker_index].dequeue()


def signal_done(servers, worker_index):
    """The op a worker runs once, at the very end, to tell each (job, task) in `servers` it has finished."""
    return tf.group(*[_done_queue(job, task).enqueue(worker_index) for job, task in servers])


def wait_until_workers_done(target, job, task, workers, is_alive, on_done, on_lost, patience_secs):
    """Blocks server (job, task) until every one of `workers` (indices) has signalled done or is lost.

    A worker is lost when is_alive(worker) has been false for `patience_secs` without a done
    signal (never started, crashed, killed): on_lost(worker) decides whether that is fatal (it
    raises) or survivable (backup workers). on_done(worker) is called for each signal.
    """
    graph = tf.Graph()
    with graph.as_default():
        queue = _done_queue(job, task)
        signals_waiting, next_signal = queue.size(), queue.dequeue()
    config = tf.ConfigProto(device_filters=[f"/job:{job}/task:{task}"])
    pending = set(workers)
    last_alive = dict.fromkeys(pending, time.time())
    checked = 0.0
    with tf.Session(target, graph=graph, config=config) as sess:
        while pending:
            for _ in range(int(sess.run(signals_waiting))):  # never blocks: this server is the only reader
                worker = int(sess.run(next_signal))
                pending.discard(worker)
                on_done(worker)
            now = time.time()
            if now - checked >= LIVENESS_POLL_SECS:
                checked = now
                for worker in sorted(pending):
                    if is_alive(worker):
                        last_alive[worker] = now
                    elif now - last_alive[worker] > patience_secs:
                        pending.discard(worker)
                        on_lost(worker)
            if pending:
                time.sleep(SIGNAL_POLL_SECS)
