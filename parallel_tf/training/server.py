"""A task's gRPC server, and a parameter server's whole life: serve until the workers are done.

A server, central (ps) or local (local_ps), exits 0 by itself once every worker it serves has
signalled that it is done (barrier.py), and gives up (exit 1) on a worker that is not running
for --startup_timeout before it finished, rather than serve a training that can no longer end.
"""

from absl import logging

from parallel_tf.cluster import addresses
from parallel_tf.cluster.reachability import accepts
from parallel_tf.compat import tf
from parallel_tf.errors import TaskFailure
from parallel_tf.graph.barrier import wait_until_workers_done
from parallel_tf.training import devices


def start_server(settings):
    """This task's server, after checking that its port is free and warning if it is exposed."""
    cluster, name = settings.cluster, task_name(settings)
    address = cluster.jobs[settings.job_name][settings.task_index]
    addresses.check_port_free(address, name)
    warning = addresses.exposure_warning(address)
    if warning:
        logging.warning("%s: %s", name, warning)
    return tf.train.Server(
        tf.train.ClusterSpec(cluster.as_dict()),
        job_name=settings.job_name,
        task_index=settings.task_index,
        config=devices.server_config(cluster),
    )


def serve(settings):
    """Hosts variables until every worker this server serves has finished, then returns."""
    job, task, cluster = settings.job_name, settings.task_index, settings.cluster
    workers = cluster.workers_served_by(job, task)
    server = start_server(settings)
    logging.info("%s:%d serving at %s", job, task, cluster.jobs[job][task])
    finished = []
    lost = []

    def on_done(worker):
        finished.append(worker)
        logging.info("worker:%d finished (%d/%d)", worker, len(finished), len(workers))

    def on_lost(worker):
        lost.append(worker)
        if worker != 0 and len(lost) <= settings.spare_workers:
            logging.warning(
                "worker:%d is gone; carrying on without it (backup workers: %d of %d may be lost)",
                worker,
                settings.spare_workers,
                len(workers),
            )
            return
        raise TaskFailure(
            f"worker:{worker} at {cluster.jobs['worker'][worker]} is not running and has not finished "
            f"(nothing listened there for --startup_timeout={settings.startup_timeout:g}s); giving up"
        )

    wait_until_workers_done(
        server.target,
        job,
        task,
        workers,
        is_alive=lambda worker: accepts(cluster.jobs["worker"][worker]),
        on_done=on_done,
        on_lost=on_lost,
        patience_secs=settings.startup_timeout,
    )
    logging.info("all workers finished; %s:%d exiting", job, task)


def task_name(settings):
    return f"{settings.job_name}:{settings.task_index}"
