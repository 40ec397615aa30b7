"""Cross-process synchronisation from shared queues on the parameter servers.

A `threading.Barrier` only works inside one process; these work across processes because every
worker's graph names the same queues (`shared_name`) on the same server device.

The step barrier: each member puts (its index, its shard loss) into every member's queue, then
takes as many items from its own. Nobody passes step t until all members have reached it, and
the chief receives every member's loss on the way, so it can log the batch's loss without
another pass. Sync mode uses it over all workers on ps 0; hierarchical mode over each group on
its local ps.

The end of training: async workers, and hierarchical groups, finish at different times, so the
chief waits until every worker has run its last step before it evaluates and saves.

The done signal (TF issue #4713): each worker puts its index into a queue on every server it
uses when it has finished; a server exits once it has heard from all of its workers.
"""

from parallel_tf.compat import tf
from parallel_tf.devices import server_cpu


def _shared_queue(name, device, dtypes, shapes):
    with tf.device(device):
        return tf.FIFOQueue(-1, dtypes, shapes=shapes, shared_name=name, name=name)


def _done_queue(job, task):
    return _shared_queue(f"parallel_tf_done_{job}_{task}", server_cpu(job, task), [tf.int32], [[]])


def step_barrier(members, worker_index, loss, after, device, name="barrier"):
    """Returns (worker indices, losses) of all `members`, ready once each has run its `after` ops.

    Barriers with different `name`s are independent: a step may pass through several.
    """
    queues = {
        member: _shared_queue(f"parallel_tf_{name}_{member}", device, [tf.int32, tf.float32], [[], []])
        for member in members
    }
    with tf.control_dependencies(after):
        arrivals = [queue.enqueue((worker_index, loss)) for queue in queues.values()]
    with tf.control_dependencies(arrivals):
        return queues[worker_index].dequeue_many(len(members))


def end_of_training(num_workers, worker_index, is_chief):
    """The op each worker runs after its last step; the chief's returns once all have run theirs."""
    queue = _shared_queue("parallel_tf_trained", server_cpu("ps", 0), [tf.int32], [[]])
    arrived = queue.enqueue(worker_index)
    if not is_chief:
        return arrived
    with tf.control_dependencies([arrived]):
        return queue.dequeue_many(num_workers)


def signal_done(servers, worker_index):
    """The op a worker runs once, at the very end, to tell each (job, task) in `servers` it has finished."""
    return tf.group(*[_done_queue(job, task).enqueue(worker_index) for job, task in servers])


def wait_until_workers_done(target, job, task, num_workers, on_done):
    """Blocks server (job, task) until its `num_workers` workers have signalled; calls on_done(worker, count)."""
    graph = tf.Graph()
    with graph.as_default():
        next_done = _done_queue(job, task).dequeue()
    config = tf.ConfigProto(device_filters=[f"/job:{job}/task:{task}"])
    with tf.Session(target, graph=graph, config=config) as sess:
        for count in range(1, num_workers + 1):
            on_done(int(sess.run(next_done)), count)
