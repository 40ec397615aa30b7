"""Clusters inside the test process: one `tf.train.Server` per task on free 127.0.0.1 ports, and each
worker's real `Trainer` in a thread of its own (TensorFlow releases the GIL while a step runs).

A cluster of processes costs each task about 3 s of TensorFlow import and 0.65 GB; here a whole
run takes a second or two, so the tests that derive exact parameter values, and the equalities
between modes, run here. A server cannot be stopped in TF1, and each holds about 90 threads (gRPC's
own) that idle until the test process ends; with fresh servers for every run, the suite's later runs
slowed by half. So each cluster shape's servers are started once and, before every later run,
cleared with TensorFlow's own `Session.reset` (every variable and queue on every task gone, every
session closed). A step that would wait forever fails after OPERATION_TIMEOUT instead.
"""

import itertools
import json
import threading

import numpy as np

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.data.sharding import Dataset
from parallel_tf.launch.local import free_loopback_addresses
from parallel_tf.training import devices, run_check
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.settings import run_settings
from parallel_tf.training.trainer import Trainer

OPERATION_TIMEOUT = 60
RUN_TIMEOUT = 120


_SERVERS = {}  # (num_ps, num_workers, groups) -> (ClusterConfig, servers by (job, task))
_COLLECTIVE_GROUPS = itertools.count(1)  # all-reduce: a group of collectives for each run (Settings.collective_group)


def start_cluster(num_ps=1, num_workers=2, groups=None):
    """Servers for every task, holding nothing: (ClusterConfig, {(job, task): server}). A shape's first call
    starts them; a later one resets them, which clears every container on every task of the cluster."""
    key = (num_ps, num_workers, json.dumps(groups))
    if key in _SERVERS:
        tf.Session.reset(_SERVERS[key][1][("worker", 0)].target)
    else:
        _SERVERS[key] = _start_servers(num_ps, num_workers, groups)
    return _SERVERS[key]


def forget_cluster(num_ps, num_workers, groups=None):
    """The next start_cluster of this shape starts new servers: after a failed collective, TensorFlow
    refuses every later one on the same servers."""
    _SERVERS.pop((num_ps, num_workers, json.dumps(groups)), None)


def _start_servers(num_ps, num_workers, groups):
    jobs = {"ps": num_ps, "worker": num_workers, **({"local_ps": len(groups)} if groups else {})}
    jobs = {job: count for job, count in jobs.items() if count}  # an all-reduce cluster has no ps
    addresses = iter(free_loopback_addresses(sum(jobs.values())))
    spec = {"cluster": {job: [next(addresses) for _ in range(count)] for job, count in jobs.items()}}
    if groups:
        spec["groups"] = groups
    config = cluster_lib.parse(spec, "test cluster")
    server_config = devices.server_config(config)
    # Every server of the cluster shares this process: the default pools (one thread per core) can be
    # taken up by one task's blocking ops (a queue's dequeue) while another's would release them.
    server_config.inter_op_parallelism_threads = 64
    servers = [
        tf.train.Server(tf.train.ClusterSpec(config.as_dict()), job_name=job, task_index=i, config=server_config)
        for job, hosts in config.jobs.items()
        for i in range(len(hosts))
    ]
    return config, {(s.server_def.job_name, s.server_def.task_index): s for s in servers}


def train(recipe, dataset, logdir, mode="sync", num_ps=1, num_workers=2, groups=None, missing=(), **flags):
    """Trains `recipe` on `dataset` with every worker in a thread; returns the chief's summary.json,
    its metrics.jsonl lines and its params.npz as a dict. `flags` are Settings fields (train_steps, ...);
    the workers in `missing` never start (their servers run, as for a task that died)."""
    logdir.mkdir(parents=True, exist_ok=True)
    flags = {"log_every": 1, **flags}
    num_ps = 0 if mode == "allreduce" else num_ps
    if mode == "single":
        trainers = [Trainer(recipe, dataset, worker_settings("single", None, 0, logdir, _fields(dataset, flags)))]
    else:
        workers = [i for i in range(num_workers) if i not in missing]
        trainers = cluster_trainers(recipe, dataset, logdir, mode, num_ps, num_workers, groups, workers, flags)
    errors = []

    def run(trainer):
        try:
            trainer.run()
        except Exception as e:  # reported by the test, with the worker it came from
            errors.append(f"worker:{trainer.settings.task_index}: {type(e).__name__}: {e}")

    threads = [
        threading.Thread(target=run, args=(trainer,), name=f"worker:{trainer.settings.task_index}", daemon=True)
        for trainer in trainers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RUN_TIMEOUT)
    if errors and not num_ps:
        forget_cluster(num_ps, num_workers, groups)
    assert not errors, errors
    assert not [t for t in threads if t.is_alive()], f"still training after {RUN_TIMEOUT}s"
    return read_outputs(logdir)


def joined_workers(recipe, dataset, logdir, mode, num_workers=2, **flags):
    """[(trainer, session), ...]: every worker's Trainer joined to fresh servers, the chief first, for
    tests that script the order of fetches and pushes themselves (plan(step) gives them). They join at
    once, each in a thread: an all-reduce worker's join waits for the others' (a broadcast). A run is one
    step (--steps_per_run=1, where the mode has the flag), as the scripts' feeds are one step's batch."""
    num_ps = 0 if mode == "allreduce" else 1
    if mode in run_check.DECLARED_SCOPES["steps_per_run"]:
        flags = {"steps_per_run": 1, **flags}
    trainers = cluster_trainers(recipe, dataset, logdir, mode, num_ps, num_workers, None, range(num_workers), flags)
    sessions = {}
    threads = [threading.Thread(target=lambda t=t: sessions.update({t: t.join()})) for t in trainers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RUN_TIMEOUT)
    return [(trainer, sessions[trainer]) for trainer in trainers]


def cluster_trainers(recipe, dataset, logdir, mode, num_ps, num_workers, groups, workers, flags):
    """A Trainer for each worker in `workers`, on fresh servers for the whole cluster; the chief writes to `logdir`."""
    config, servers = start_cluster(num_ps, num_workers, groups)
    fields = _fields(dataset, flags)
    if not num_ps:
        fields["collective_group"] = next(_COLLECTIVE_GROUPS)
    return [
        Trainer(
            recipe,
            dataset,
            worker_settings(mode, config, i, logdir if i == 0 else None, fields),
            servers[("worker", i)].target,
        )
        for i in workers
    ]


def _fields(dataset, flags):
    """The tests' defaults: the whole dataset as the global batch, 3 steps, learning rate 0.5."""
    return {"global_batch_size": len(dataset.train_x), "train_steps": 3, "learning_rate": 0.5, **flags}


def read_outputs(logdir):
    with np.load(logdir / "params.npz") as params:
        named = {name: params[name] for name in params.files}
    return {
        "summary": json.loads((logdir / "summary.json").read_text()),
        "metrics": [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()],
        "params": named,
    }


def worker_settings(mode, config, task_index, logdir, fields):
    """Settings for worker `task_index`; `fields` (Settings fields, and declared flags) override the defaults.
    Made, checked and composed as a task makes its Settings (settings.run_settings), the fields being
    the flags given."""
    given = set(fields)
    defaults = dict(
        optimizer="sgd", seed=0, dataset="test", operation_timeout=OPERATION_TIMEOUT, startup_timeout=OPERATION_TIMEOUT
    )
    return run_settings(
        given,
        mode=mode,
        job_name="worker",
        task_index=task_index,
        cluster=config,
        logdir=str(logdir) if logdir else None,
        **{**defaults, **fields},
    )


def scalar_recipe(loss_fn, w0):
    """A model with one parameter `w` (initially w0) whose 'logits' are features - w, and `loss_fn` of them:
    the gradient is known in closed form, so the parameters after k steps can be worked out by hand."""

    def model_fn(features, num_classes):
        w = tf.get_variable("w", [1], initializer=tf.constant_initializer(w0))
        return features - w

    return Recipe(name="scalar", model_fn=model_fn, datasets={}, loss_fn=loss_fn)


def half_mean_square(labels, residuals):
    """½ mean (x - w)²: its gradient is w - mean(x), so a step depends on the w it was computed at."""
    return 0.5 * tf.reduce_mean(tf.square(residuals))


def slope(labels, residuals):
    """w - mean(x): the gradient is 1 whatever w and the data are."""
    return -tf.reduce_mean(residuals)


def linear(labels, residuals):
    """mean(y (x - w)), where the dataset's labels y are its values x: the gradient is -mean(x) whatever w
    is, so where updates are not ordered (async, hierarchical groups) the sum of them still is exact."""
    return tf.reduce_mean(tf.cast(labels, tf.float32) * residuals)


def scalar_dataset(*values):
    """One feature per example (its label is the same whole number); global batch t is a shuffle of them,
    worker i takes value i of it."""
    x = np.array([[v] for v in values], np.float32)
    y = np.array(values, np.int64)
    return Dataset(x, y, x, y, num_classes=1, name="scalar")
