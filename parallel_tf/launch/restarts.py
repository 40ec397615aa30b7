"""A launched cluster run to its end: each task's command, the spec they read written into the logdir, the tasks
started and watched (processes.py), and after a failure that is not a mistake a restart from the latest
checkpoint, up to --max_restarts times (with --min_workers, without the worker that failed). Free of TensorFlow,
as the launcher is."""

import json
import os
import sys

from absl import flags

from parallel_tf.cli import counted
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.launch import hosts
from parallel_tf.launch.local import gpu_environments
from parallel_tf.launch.processes import Cluster, describe_exit, say
from parallel_tf.training import run_check

FLAGS = flags.FLAGS


def run_with_restarts(cluster, recipe_path, run_dir, common, simulated):
    """Runs the cluster; after a failure (not a mistake), restarts it up to --max_restarts times. Returns
    the exit code: 0, 2 for a task's mistake, 1 for a failure with no restart left."""
    for restart in range(FLAGS.max_restarts + 1):
        spare_workers = run_check.spare_workers(cluster)
        tasks = task_commands(cluster, recipe_path, write_spec(cluster, run_dir), common)
        say(f"{counted(len(tasks), 'task')} ({job_counts(cluster)}), mode {FLAGS.mode}; logdir {run_dir}")
        namespaces, needed = {}, {}
        if simulated:
            namespaces = {name: simulated.namespace(hosts.host_of(address)) for name, address in cluster.tasks()}
            needed = simulated.needed()
        pins = (FLAGS.intra_op_threads, FLAGS.kernels) if FLAGS.fork_tasks else None
        failed = Cluster(tasks, gpu_environments(cluster), spare_workers, namespaces, pins, needed).run()
        if failed and finished(run_dir, FLAGS.train_steps):  # the chief wrote the whole run's summary first
            say(f"{failed[0]} {describe_exit(failed[1])} after the chief finished the run; stopped the other tasks")
        if not failed or finished(run_dir, FLAGS.train_steps):
            report_summary(run_dir)
            return 0
        name, code = failed
        if name in needed:  # a restart would run on links that no longer do what the flags say
            say(f"{name} (pid {needed[name].pid}) {describe_exit(code)}; stopped the tasks, the links are gone")
            return 1
        if code == 2 or restart == FLAGS.max_restarts:
            say(f"{name} {describe_exit(code)}; stopped the other tasks")
            return 2 if code == 2 else 1
        cluster = cluster_for_restart(cluster, name, FLAGS.min_workers, fits)
        say(
            f"{name} {describe_exit(code)}; stopped the other tasks; restart {restart + 1} of "
            f"{FLAGS.max_restarts} from the latest checkpoint with {cluster.num_workers} workers"
        )


def write_spec(cluster, run_dir):
    """Writes the spec every task reads into the logdir; returns its path."""
    spec_path = os.path.join(run_dir, "cluster_spec.json")
    with open(spec_path, "w", encoding="utf-8") as f:
        f.write(cluster.to_json())
    return spec_path


def task_commands(cluster, recipe_path, spec_path, common):
    """(name, command) of every task, in start order."""
    return [
        (
            f"{job}:{index}",
            [sys.executable, "-u", recipe_path, f"--job_name={job}", f"--task_index={index}"]
            + [f"--cluster_spec={spec_path}", *common],
        )
        for job in cluster.jobs
        for index in range(len(cluster.jobs[job]))
    ]


def job_counts(cluster):
    """'1 ps, 2 workers'."""
    return ", ".join(
        counted(len(tasks), job, plural=None if job == "worker" else job) for job, tasks in cluster.jobs.items()
    )


def cluster_for_restart(cluster, failed, min_workers, fits):
    """The cluster to restart: the same one; or, with --min_workers and a failed worker, the same one
    without that worker, cut to the most workers left that `fits` (the run's arithmetic) allows."""
    if min_workers is None or not failed.startswith("worker:"):
        return cluster
    lost = cluster.jobs["worker"][int(failed.split(":")[1])]
    left = [address for address in cluster.jobs["worker"] if address != lost]
    for count in range(len(left), min_workers - 1, -1):
        smaller = cluster_lib.parse({"cluster": {**cluster.as_dict(), "worker": left[:count]}}, "restart")
        if fits(smaller):
            return smaller
    say(f"no worker count from {len(left)} down to --min_workers={min_workers} fits the run; restarting all")
    return cluster


def fits(cluster):
    try:
        run_check.check_run_fits(cluster, FLAGS.mode)
    except ConfigError:
        return False
    return True


def finished(run_dir, train_steps):
    """Whether `run_dir` holds the summary of a run trained to `train_steps`: this run's, since a finished run
    of as many steps is refused before anything starts."""
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
            return json.load(f)["train_steps"] == train_steps
    except (OSError, ValueError, KeyError):
        return False


def report_summary(run_dir):
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        say(f"no summary.json in {run_dir}")
        return
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    say(
        f"eval_accuracy {summary['eval_accuracy']:.4f}  final_loss {summary['final_loss']:.6f}  "
        f"{summary['ms_per_step']:.2f} ms/step  params_sha256 {summary['params_sha256']}"
    )
    say(f"outputs: {run_dir}")
