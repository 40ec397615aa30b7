"""Cross-process synchronisation from shared queues on the parameter servers.

A `threading.Barrier` only works inside one process; these work across processes because every
worker's graph names the same queues (`shared_name`) on the same server device.

The step barrier: each member puts (its index, its shard loss) into every member's queue, then
takes as many items from its own. Nobody passes step t until all members have reached it, and
the chief receives every member's loss on the way, so it can log the batch's loss without
another pass. Sync mode uses it over all workers on ps 0; hierarchical mode over each group on
its local ps.

The chief hearing from all: each worker signals once it has done something (written its
gradients, run its last step); only the chief waits for all N signals. Async workers and
hierarchical groups finish at different times, so the chief waits this way for every worker's
last step before it evaluates and saves.

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


def step_barrier(members, worker_index, loss, after, device):
    """Returns (worker indices, losses) of all `members`, ready once each has run its `after` ops."""
    queues = {
        member: _shared_queue(f"parallel_tf_barrier_{member}", device, [tf.int32, tf.float32], [[], []])
        for member in members
    }
    with tf.control_dependencies(after):
        arrivals = [queue.enqueue((worker_index, loss)) for queue in queues.values()]
    with tf.control_dependencies(arrivals):
        return queues[worker_index].dequeue_many(len(members))


def chief_hears_from_all(num_workers, worker_index, after, name):
    """Each worker tells the chief once it has run `after` (ops); the chief's op returns once all N have.

    Cheaper than a step barrier when only the chief needs to know: the others do not wait.
    """
    queue = _shared_queue(f"parallel_tf_{name}", server_cpu("ps", 0), [tf.int32], [[]])
    with tf.control_dependencies(after):
        told = queue.enqueue(worker_index)
    if worker_index != 0:
        return told
    with tf.control_dependencies([told]):
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
