"""Cross-process synchronisation from shared queues on the parameter servers.

A `threading.Barrier` only works inside one process; these work across processes because every
worker's graph names the same queues (`shared_name`) on the same ps device.

The step barrier: worker i puts (i, its shard loss) into every worker's queue, then takes N
items from its own. Nobody passes step t until all N have reached it, and the chief receives
every worker's loss on the way, so it can log the global batch's loss without another pass.

The done signal (TF issue #4713): each worker puts its index into a queue on every ps task when
it has finished; a ps exits once it has heard from all of them.
"""

from parallel_tf.compat import tf
from parallel_tf.devices import ps_cpu


def _shared_queue(name, device, dtypes, shapes):
    with tf.device(device):
        return tf.FIFOQueue(-1, dtypes, shapes=shapes, shared_name=name, name=name)


def _done_queue(ps_task):
    return _shared_queue(f"parallel_tf_done_{ps_task}", ps_cpu(ps_task), [tf.int32], [[]])


def step_barrier(num_workers, worker_index, loss, after):
    """Returns (worker indices, losses) of all N workers, ready once all have run `after` (ops)."""
    queues = [
        _shared_queue(f"parallel_tf_barrier_{j}", ps_cpu(0), [tf.int32, tf.float32], [[], []])
        for j in range(num_workers)
    ]
    with tf.control_dependencies(after):
        arrivals = [queue.enqueue((worker_index, loss)) for queue in queues]
    with tf.control_dependencies(arrivals):
        return queues[worker_index].dequeue_many(num_workers)


def signal_done(num_ps, worker_index):
    """The op a worker runs once, at the very end, to tell every ps it has finished."""
    return tf.group(*[_done_queue(k).enqueue(worker_index) for k in range(num_ps)])


def wait_until_workers_done(target, ps_task, num_workers, on_done):
    """Blocks a ps until every worker has signalled; calls on_done(worker, count) for each."""
    graph = tf.Graph()
    with graph.as_default():
        next_done = _done_queue(ps_task).dequeue()
    config = tf.ConfigProto(device_filters=[f"/job:ps/task:{ps_task}"])
    with tf.Session(target, graph=graph, config=config) as sess:
        for count in range(1, num_workers + 1):
            on_done(int(sess.run(next_done)), count)
