"""One task of the parameter-server floor (tf_strategies.py --strategy=floor): what a sync step made in a session
run of its own cannot go below. (A run of several steps, --steps_per_run, pays one run's overhead for all of
them, and can go below it: the bench compares only one-run-a-step systems with it.)

A worker's floor step is one session run: it reads the recipe's parameters from the ps, computes its
gradients on its shard of the global batch (the trainer's data order) and writes them into its slot
next to the parameters on the ps. Those are the two crossings and the compute every parameter-server
sync step makes, with the model's real bytes packed one tensor each way as a sync step packs them
(graph/server_vectors.py), and nothing else: no gather, no apply, no wait for the
other workers, which run their floor steps beside the chief's from its start to its end. So it trains
nothing; the chief writes metrics.jsonl and summary.json as every other run does, and the bench puts
each sync row's step time against it.

Like tf_strategy_task.py, imported by the task only: the launching process stays free of threads.
"""

import json
import os
import time

from absl import flags

from parallel_tf.cluster.reachability import accepts
from parallel_tf.compat import tf
from parallel_tf.data.sharding import GlobalBatchSharder
from parallel_tf.errors import TaskFailure
from parallel_tf.files import write_atomically
from parallel_tf.graph import placement
from parallel_tf.graph.aggregation import SlotAggregator
from parallel_tf.graph.barrier import signal_done, wait_until_workers_done
from parallel_tf.graph.model import build_model, seed_everything
from parallel_tf.graph.server_vectors import PackedReads, sent_packed
from parallel_tf.tools import tf_strategy_task
from parallel_tf.training import devices, traffic

FLAGS = flags.FLAGS
PS = "/job:ps/task:0/device:CPU:0"
POLL_SECS = 0.02  # how often the workers look for the chief's parameters, and the chief for the others
LOST_AFTER_SECS = 60  # a worker not listening for this long, and not done, is gone


def floor_step(recipe, dataset, worker, num_workers, num_gpus=0):
    """(model, the op of worker `worker`'s floor step): its gradients written into row `worker` of the slots
    next to the parameters on the one ps, both ways packed as a sync step's are (graph/server_vectors.py). Built in
    the default graph."""
    setter = tf.train.replica_device_setter(1, ps_device=PS, worker_device=placement.worker_device(worker, num_gpus))
    with tf.device(setter):
        model = build_model(recipe, dataset)
        variables = tf.trainable_variables()
        slots = SlotAggregator(variables, num_workers)
        reads = PackedReads(variables)
        model = model.on(recipe, model.features, model.labels, reads)
        gradients = tf.gradients(model.loss, reads.of(variables))
        received, _ = sent_packed([gradients], variables)
        return model, slots.write(worker, received)


def run(recipe):
    """This task's part: the ps serves until every worker is done. The chief runs its floor steps and logs them;
    the other workers run theirs until the chief has finished, so it shares the ps with all of them throughout."""
    jobs = json.loads(FLAGS.cluster)
    settings = tf_strategy_task.plain_settings()
    server = tf.train.Server(
        tf.train.ClusterSpec(jobs), FLAGS.job_name, FLAGS.task_index, config=devices.session_config()
    )
    if FLAGS.job_name == "ps":
        serve(server, jobs["worker"])
        return
    dataset = recipe.datasets[settings.dataset](settings)
    worker, num_workers = FLAGS.task_index, len(jobs["worker"])
    seed_everything(settings.seed)
    model, write = floor_step(recipe, dataset, worker, num_workers, devices.visible_gpu_count())
    with tf.device(PS):
        joined = tf.get_variable("workers_joined", [], tf.int32, tf.zeros_initializer(), trainable=False)
        finished = tf.get_variable("chief_finished", [], tf.bool, tf.zeros_initializer(), trainable=False)
    done = signal_done([("ps", 0)], worker)
    manager = tf.train.SessionManager(ready_op=tf.report_uninitialized_variables(), recovery_wait_secs=POLL_SECS)
    config = devices.session_config(["/job:ps/task:0", f"/job:worker/task:{worker}"])
    if worker == 0:
        sess = manager.prepare_session(server.target, init_op=tf.global_variables_initializer(), config=config)
    else:
        sess = manager.wait_for_session(server.target, config=config)
    sharder = GlobalBatchSharder(len(dataset.train_x), settings.global_batch_size, num_workers, settings.seed)

    def batch(step):
        rows = sharder.shard(step, worker)
        return {model.features: dataset.train_x[rows], model.labels: dataset.train_y[rows]}

    if worker == 0:
        while sess.run(joined) < num_workers - 1:  # the others first, so that every step shares the ps
            time.sleep(POLL_SECS)
        log = tf_strategy_task.Log(settings, True)
        for step in range(settings.train_steps):
            _, loss = sess.run([write, model.loss], batch(step))
            log.maybe(step + 1, lambda loss=loss: float(loss))
        sess.run(finished.assign(True))
    else:
        sess.run(joined.assign_add(1))
        step = 0
        while not sess.run([write, finished], batch(step))[1]:  # the flag read in the same run as the parameters
            step += 1
    sess.run(done)
    sess.close()
    if worker == 0:
        sent, received = traffic.step_bytes([write, model.loss], ("worker", 0))
        summary = {
            "strategy": "floor",
            "num_workers": num_workers,
            "global_batch_size": settings.global_batch_size,
            "train_steps": settings.train_steps,
            "seed": settings.seed,
            "bytes_sent_per_step": sent,
            "bytes_received_per_step": received,
            "tf_version": tf.VERSION,
        }
        write_atomically(os.path.join(settings.logdir, "summary.json"), json.dumps(summary, indent=2) + "\n")


def serve(server, workers):
    """The ps: serves until each worker at `workers` (addresses) has signalled done; fails on one that is gone."""

    def lost(worker):
        raise TaskFailure(f"floor: worker:{worker} at {workers[worker]} stopped before it finished")

    wait_until_workers_done(
        server.target,
        "ps",
        0,
        range(len(workers)),
        is_alive=lambda worker: accepts(workers[worker]),
        on_done=lambda worker: None,
        on_lost=lost,
        patience_secs=LOST_AFTER_SECS,
    )


if __name__ == "__main__":
    from parallel_tf.cli import exit_config_error

    exit_config_error(
        "floor_task.py is the task the bench's floor starts: run python -m parallel_tf.tools.tf_strategies "
        "--strategy=floor (its --help says how)"
    )
