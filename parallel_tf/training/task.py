"""Runs one process of a recipe: a parameter server (server.py), or a worker (trainer.py), or, with
no cluster flags at all, a single plain process: the reference a 1-worker cluster must match bitwise.

The entry point decides which of the two a process is and turns failures into exit codes: a
user's mistake is one line and exit 2, a failure at run time names the task and exits 1.
"""

import dataclasses
import os
import sys
import time

import setproctitle
from absl import app, flags, logging

from parallel_tf import compat
from parallel_tf.cli import CHECKED_DATASET, exit_config_error, parse_flags_or_exit
from parallel_tf.cluster import slurm
from parallel_tf.cluster.config import SERVER_JOBS
from parallel_tf.cluster.reachability import wait_until_reachable
from parallel_tf.compat import tf
from parallel_tf.data import datasets
from parallel_tf.errors import ConfigError, TaskFailure, one_line
from parallel_tf.graph import portable_kernel
from parallel_tf.graph.model import trainable_shapes
from parallel_tf.training import devices, logdir, run_check, watchdog
from parallel_tf.training.options import link
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.run_flags import LAUNCHER_HINTS, define_task_flags
from parallel_tf.training.server import serve, start_server, task_name
from parallel_tf.training.task_settings import settings_from_flags
from parallel_tf.training.trainer import Trainer

__all__ = ["Recipe", "run"]


def run(recipe):
    """The entry point of every recipe: `task.run(Recipe(...))` under its `__main__`."""
    define_task_flags(list(recipe.datasets))
    app.run(lambda argv: main(recipe, argv), flags_parser=lambda argv: parse_flags_or_exit(argv, hints=LAUNCHER_HINTS))


def main(recipe, argv):
    if len(argv) > 1:
        exit_config_error(f"unexpected argument {argv[1]!r}; flags look like --name=value")
    _configure_logging()
    try:
        settings = settings_from_flags()
        compat.pin_before_loading(settings.intra_op_threads, settings.kernels)  # before anything loads TensorFlow
        if flags.FLAGS.check_flags:  # every flag checked; nothing started, read or written
            if settings.job_name == "worker" and compat.kernels(settings.kernels) == "portable":
                portable_kernel.check()
            datasets.check_loader_flags(recipe.datasets[settings.dataset], settings)
            _check_model(recipe, settings)
            if settings.logdir and settings.is_chief:  # a resume this command is not: refused before any start
                identity = logdir.run_identity(recipe.name, settings)
                changes = logdir.resumable_changes(settings)
                logdir.check_resumable(settings.logdir, identity, settings.train_steps, settings.fresh, changes)
            print(f"{CHECKED_DATASET}{settings.dataset}")  # the launcher downloads it before fencing
            return
        _name_this_process(settings)
        link.check_shaped(settings, os.environ)  # not in the launcher's check: it shapes the link after
        if flags.FLAGS.cluster_resolver == "slurm":  # before TensorFlow sees a GPU
            _narrow_gpus(slurm.narrowed_gpus(os.environ, settings.job_name))
        if settings.job_name in SERVER_JOBS:
            serve(settings)
        else:
            train(recipe, settings)
    except ConfigError as e:  # one line and exit 2, whether found before the server started or after
        print(f"error: {e}", file=sys.stderr)
        _exit_now(2)
    except TaskFailure as e:  # a clause of its own: naming tf.errors would import TensorFlow just to fail
        _fail(settings, str(e))
    except tf.errors.OpError as e:
        _fail(settings, one_line(e))


def _name_this_process(settings):
    """The task's process title, what `ps`, `top` and `pgrep -f` show: `parallel_tf worker:1 LOGDIR -- COMMAND`. A
    task forked by a fork server (launch/forkserver.py) would otherwise show the server's command line, the same
    for every task; so a task names itself, however the launcher started it (docs/failures-and-security.md). Not
    in a Slurm step: setproctitle moves the process's environment, by which slurmstepd finds a step's processes,
    and `scancel --signal=KILL` then left a step's tasks running (tests/test_slurm_real.py); srun's tasks keep
    the command line they were started with, which names their job and index already."""
    if SLURM_STEP in os.environ:
        return
    command = " ".join([sys.executable, *sys.argv])
    setproctitle.setproctitle(f"parallel_tf {task_name(settings)} {settings.logdir or ''} -- {command}")


SLURM_STEP = "SLURM_STEP_ID"  # set in every task srun starts


def train(recipe, settings):
    """A worker: claims the logdir (chief), waits for its servers, starts its own, loads data, trains. A
    default logdir it made is removed again if the start is refused and it is still empty."""
    made_logdir = settings.is_chief and not settings.logdir
    if settings.is_chief:  # before loading data, which may mean a download: a bad logdir should fail first
        settings = _claim_logdir(recipe, settings)
    try:
        _start_and_train(recipe, settings)
    except (ConfigError, TaskFailure):
        if made_logdir:
            logdir.remove_if_empty(settings.logdir)
        raise


def _check_model(recipe, settings):
    """The checks that need the model's shapes, in --check_flags, where the dataset's shape is known without
    reading it (its loader is this package's); the trainer makes them again as it builds."""
    shape = datasets.known_shape(recipe.datasets[settings.dataset])
    if shape and run_check.needs_model_shapes(settings):
        run_check.check_model(settings, trainable_shapes(recipe, *shape))


def _start_and_train(recipe, settings):
    """The rest of a worker's start, once its logdir is claimed: its server and peers, its data, training."""
    target = ""
    if settings.cluster:  # before the data loads: a missing peer is reported within --startup_timeout of the start
        cluster = settings.cluster
        # Listening first tells the parameter servers this worker is alive, and the other workers of an
        # all-reduce cluster, which wait for it as it waits for them.
        server = start_server(settings)  # a local until training ends: it serves as long as it is referenced
        target = server.target
        peers = {f"{job}:{task}": cluster.jobs[job][task] for job, task in cluster.peers_of(settings.task_index)}
        wait_until_reachable(peers, settings.startup_timeout)
    dataset = recipe.datasets[settings.dataset](settings)
    settings = dataclasses.replace(settings, num_gpus=devices.visible_gpu_count())
    if settings.num_gpus:
        logging.info("GPU kernels: %s=%s", devices.DETERMINISTIC_OPS, devices.use_deterministic_gpu_kernels())
    trainer = Trainer(recipe, dataset, settings, target)
    if watchdog.needed(settings):  # TensorFlow 1.15's collectives do not time out by themselves
        watchdog.watch(trainer, settings, lambda message: _fail(settings, message))
    trainer.run()


def _narrow_gpus(cuda_visible_devices):
    if cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices


def _claim_logdir(recipe, settings):
    """The chief's logdir: created, or an interrupted run of this same command in it (to resume)."""
    run_dir = settings.logdir or logdir.default_logdir(recipe.name, settings.mode)
    moved_to = logdir.prepare_logdir(run_dir, fresh=settings.fresh, train_steps=settings.train_steps)
    if moved_to:
        logging.info("--fresh: moved the old %s aside to %s", run_dir, moved_to)
    logdir.check_same_run(run_dir, logdir.run_identity(recipe.name, settings), logdir.resumable_changes(settings))
    return dataclasses.replace(settings, logdir=run_dir)


def _fail(settings, message):
    """A failure at run time: named, and the exit code a restart may cure."""
    logging.error("%s failed: %s", task_name(settings), message)
    _exit_now(flags.FLAGS.failure_exit_code)


def _exit_now(code):
    """Exits without closing a session or server: closing one whose peers are gone waits on them (30 s in TF),
    and TensorFlow's objects, collected on the way out, warn of every op the run never ran."""
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _configure_logging():
    logging.get_absl_handler().setFormatter(_ShortFormatter())


class _ShortFormatter(logging.PythonFormatter):
    """`HH:MM:SS message`: the launcher already prefixes each line with the task."""

    def format(self, record):
        return f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.getMessage()}"
