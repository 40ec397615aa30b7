"""Runs one process of a recipe: a parameter server, a worker, or a single-process run.

A ps serves until every worker has signalled that it is done, then exits 0 by itself.
A worker builds its mode's graph, joins (the chief initialises), trains in lockstep, and the
chief writes the outputs. With no cluster flags at all, the recipe trains in one plain process:
the reference a 1-worker cluster must match bitwise.
"""

import dataclasses
import sys
import time

from absl import app, flags, logging

from parallel_tf import devices, logdir, outputs
from parallel_tf.barrier import gather_at_chief, signal_done, wait_until_workers_done
from parallel_tf.cli import exit_config_error, parse_flags_or_exit
from parallel_tf.cluster import SERVER_JOBS
from parallel_tf.compat import TF_VERSION, tf
from parallel_tf.data import GlobalBatchSharder
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.flags import define_task_flags, settings_from_flags
from parallel_tf.graph import SCRATCH, seed_everything
from parallel_tf.modes import builder
from parallel_tf.peers import wait_until_reachable


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a recipe says: its name, its model and its data. The library does the rest."""

    name: str
    model_fn: object  # (features, num_classes) -> logits
    datasets: dict  # --dataset name -> (settings) -> data.Dataset; the first is the default
    augment: object = None  # optional (images, step, positions, settings) -> images, see data.py


def run(recipe):
    """The entry point of every recipe: `task.run(Recipe(...))` under its `__main__`."""
    define_task_flags(list(recipe.datasets))
    for flag in flags.FLAGS.get_flags_for_module("parallel_tf.flags"):  # so --help lists them, not only --helpfull
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    app.run(lambda argv: main(recipe, argv), flags_parser=parse_flags_or_exit)


def main(recipe, argv):
    if len(argv) > 1:
        exit_config_error(f"unexpected argument {argv[1]!r}; flags look like --name=value")
    _configure_logging()
    try:
        settings = settings_from_flags()
        if settings.job_name in SERVER_JOBS:
            serve(settings)
        else:
            train(recipe, settings)
    except ConfigError as e:
        exit_config_error(str(e))
    except (TaskFailure, tf.errors.OpError) as e:
        logging.error("%s failed: %s", _task_name(settings), _first_line(e))
        sys.exit(1)


def serve(settings):
    """A parameter server, central or local: hosts variables until its workers have finished, then returns."""
    job, task = settings.job_name, settings.task_index
    num_workers = settings.cluster.workers_served_by(job, task)
    server = _start_server(settings)
    logging.info("%s:%d serving at %s", job, task, settings.cluster.jobs[job][task])

    def on_done(worker, count):
        logging.info("worker:%d finished (%d/%d)", worker, count, num_workers)

    wait_until_workers_done(server.target, job, task, num_workers, on_done)
    logging.info("all workers finished; %s:%d exiting", job, task)


def train(recipe, settings):
    if settings.is_chief:  # before loading data, which may mean a download: a bad logdir should fail first
        run_dir = settings.logdir or logdir.default_logdir(recipe.name, settings.mode)
        settings = dataclasses.replace(settings, logdir=run_dir)
        logdir.prepare_logdir(run_dir)
    dataset = recipe.datasets[settings.dataset](settings)
    sharder = GlobalBatchSharder(len(dataset.train_x), settings.global_batch_size, settings.num_workers, settings.seed)
    cluster, task_index = settings.cluster, settings.task_index
    server = _start_server(settings) if cluster else None  # kept referenced: it serves until exit
    if server:
        servers = cluster.servers_of(task_index)
        peers = {f"{job}:{task}": cluster.jobs[job][task] for job, task in servers}
        wait_until_reachable(peers, settings.startup_timeout)
    settings = dataclasses.replace(settings, num_gpus=devices.visible_gpu_count())

    graph = tf.Graph()
    with graph.as_default():
        seed_everything(settings.seed)
        built = builder(settings.mode)(recipe.model_fn, dataset, settings, cluster, task_index)
        if server:
            trained = gather_at_chief(cluster.num_workers, task_index, 0.0, after=[], name="trained")
            done = signal_done(servers, task_index)
        saver = tf.train.Saver(_saved_variables(), sharded=True) if settings.is_chief else None
    graph.finalize()

    started = time.time()
    with _join(built, graph, settings, server.target if server else "") as sess:
        first_step = int(sess.run(built.position))
        writer = outputs.RunWriter(settings.logdir, graph) if settings.is_chief else None
        train_seconds = _train_loop(sess, built, recipe, dataset, sharder, settings, first_step, writer)
        if server:
            sess.run(trained)  # the chief waits here for every worker's last step
        if settings.is_chief:
            summary = _summarize(sess, built, dataset, sharder, settings, recipe, train_seconds, time.time() - started)
            saver.save(sess, f"{settings.logdir}/model.ckpt", global_step=tf.train.get_global_step(graph))
            named = _named_params(sess)
            summary["params_sha256"] = outputs.params_sha256(named)
            writer.finish(summary, named)
            logging.info(
                "done: eval_accuracy %.4f, final loss %.6f, params_sha256 %s; outputs in %s",
                summary["eval_accuracy"],
                summary["final_loss"],
                summary["params_sha256"],
                settings.logdir,
            )
        if server:
            sess.run(done)


def _train_loop(sess, built, recipe, dataset, sharder, settings, first_step, writer):
    """Runs steps first_step..train_steps-1; the chief logs; returns the seconds spent."""
    model = built.model
    positions = sharder.positions(settings.task_index)
    started = interval_start = time.time()
    interval_steps = 0
    for step in range(first_step, settings.train_steps):
        rows = sharder.shard(step, settings.task_index)
        images = dataset.train_x[rows]
        if recipe.augment:
            images = recipe.augment(images, step, positions, settings)
        feed = {model.features: images, model.labels: dataset.train_y[rows]}
        for fetches in built.plan(step):
            result = sess.run(fetches, feed)
        interval_steps += 1
        done = step + 1
        if writer and (done % settings.log_every == 0 or done == settings.train_steps):
            now = time.time()
            rate = interval_steps * settings.global_batch_size / max(now - interval_start, 1e-9)
            loss = _batch_loss(result)
            counts = _read_counters(sess, built)
            writer.log_step(done, loss, rate, **counts)
            logging.info(
                "step %d/%d  loss %.6f  %.0f examples/sec%s",
                done,
                settings.train_steps,
                loss,
                rate,
                "".join(f"  {name} {value}" for name, value in counts.items()),
            )
            interval_start, interval_steps = now, 0
    return time.time() - started


def _batch_loss(step_result):
    """Mean of the shard losses the chief saw this step, summed in worker order so the number is
    repeatable: the global batch's in sync mode, its group's in hierarchical, its own in async."""
    order = step_result["workers"].argsort()
    return float(step_result["losses"][order].astype("float64").mean())


def _summarize(sess, built, dataset, sharder, settings, recipe, train_seconds, wall_seconds):
    """The run's results. final_loss is the final parameters' loss on the last global batch, in one
    pass by the chief, so it compares models across worker counts without summation order."""
    model = built.model
    if built.refresh_op is not None:
        sess.run(built.refresh_op)
    eval_accuracy = sess.run(model.accuracy, {model.features: dataset.eval_x, model.labels: dataset.eval_y})
    rows = sharder.global_batch(settings.train_steps - 1)
    final_loss = sess.run(model.loss, {model.features: dataset.train_x[rows], model.labels: dataset.train_y[rows]})
    steps = settings.train_steps
    return {
        "recipe": recipe.name,
        "dataset": dataset.name,
        "mode": settings.mode,
        "num_workers": settings.num_workers,
        "num_ps": settings.cluster.num_ps if settings.cluster else 0,
        "num_gpus": settings.num_gpus,
        "global_batch_size": settings.global_batch_size,
        "train_steps": steps,
        "learning_rate": settings.learning_rate,
        "optimizer": settings.optimizer,
        "seed": settings.seed,
        "final_loss": float(final_loss),
        "eval_accuracy": float(eval_accuracy),
        "examples_per_sec": steps * settings.global_batch_size / train_seconds,
        "ms_per_step": 1000.0 * train_seconds / steps,
        "wall_seconds": wall_seconds,
        "tf_version": TF_VERSION,
        **_aggregation(settings),
        **_read_counters(sess, built),
    }


def _aggregation(settings):
    """How a sync run summed its gradients, which decides what its reproducibility promises are."""
    if settings.mode != "sync":
        return {}
    strict = {"microbatches": settings.microbatches} if settings.strict_determinism else {}
    return {"aggregation": settings.aggregation, "strict_determinism": settings.strict_determinism, **strict}


def _read_counters(sess, built):
    """The mode's counters (e.g. updates by each async worker) as plain lists for JSON."""
    if not built.counters:
        return {}
    return {name: value.tolist() for name, value in sess.run(built.counters).items()}


def _saved_variables():
    scratch = {v.name for v in tf.get_collection(SCRATCH)}
    return [v for v in tf.global_variables() if v.name not in scratch]


def _named_params(sess):
    variables = tf.trainable_variables()
    return dict(zip((v.name for v in variables), sess.run(variables), strict=True))


def _join(built, graph, settings, target):
    """A session on the cluster. The chief (worker 0) initialises the shared parameters and, in
    hierarchical mode, each group's chief its local ps once those are ready; the others wait."""
    manager = tf.train.SessionManager(
        local_init_op=built.local_init_op,
        ready_op=built.ready_op,
        ready_for_local_init_op=built.ready_for_local_init_op,
        graph=graph,
        recovery_wait_secs=0.5,
    )
    filters = devices.worker_device_filters(settings.cluster, settings.task_index) if settings.cluster else None
    config = devices.session_config(filters)
    if settings.is_chief or built.group_init:
        return manager.prepare_session(
            target,
            init_op=built.init_op if settings.is_chief else None,
            init_fn=_group_initializer(built.group_init, settings) if built.group_init else None,
            config=config,
        )
    try:
        return manager.wait_for_session(target, config=config, max_wait_secs=settings.startup_timeout)
    except tf.errors.DeadlineExceededError:
        raise _chief_did_not_initialise(settings) from None


def _group_initializer(group_init, settings):
    """prepare_session's init_fn for a group chief: waits for the central parameters, then initialises its local ps."""
    init_op, central_uninitialised = group_init

    def init_fn(sess):
        deadline = time.time() + settings.startup_timeout
        while sess.run(central_uninitialised).size:
            if time.time() > deadline:
                raise _chief_did_not_initialise(settings)
            time.sleep(0.5)
        sess.run(init_op)

    return init_fn


def _chief_did_not_initialise(settings):
    return TaskFailure(
        f"the chief (worker:0) did not initialise the model within --startup_timeout={settings.startup_timeout:g}s"
    )


def _start_server(settings):
    cluster = settings.cluster
    return tf.train.Server(
        tf.train.ClusterSpec(cluster.as_dict()),
        job_name=settings.job_name,
        task_index=settings.task_index,
        config=devices.session_config(),
    )


def _task_name(settings):
    return f"{settings.job_name}:{settings.task_index}"


def _first_line(error):
    """One line that says what went wrong. TF 2.x's session errors start with 'Graph execution error:'
    and a Python traceback; the error itself comes last, before the '[[node ...]]' marker."""
    message = getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.strip().startswith("[[")]
    if not lines:
        return type(error).__name__
    if isinstance(error, tf.errors.OpError):
        return f"{type(error).__name__}: {lines[-1]}"
    return lines[0]


def _configure_logging():
    logging.get_absl_handler().setFormatter(_ShortFormatter())


class _ShortFormatter(logging.PythonFormatter):
    """`HH:MM:SS message`: the launcher already prefixes each line with the task."""

    def format(self, record):
        return f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.getMessage()}"
