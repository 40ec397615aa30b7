"""TensorFlow's own distribution strategies training a recipe's model: the benchmark's peers.

    python -m parallel_tf.tools.tf_strategies --strategy=mirrored|parameter_server --num_workers=N
        --recipe=mnist --logdir=DIR [--global_batch_size ... run flags] [the recipe's flags]

mirrored          MultiWorkerMirroredStrategy: sync all-reduce (RING), one process per worker, each
                  computing on its slice of the global batch; every worker applies the mean gradient.
parameter_server  ParameterServerStrategy: async; a coordinator (the chief) schedules each global
                  batch's N slices on N worker processes, which apply their gradient to 1 ps.

Both train what our runs train: the recipe's model function (its get_variable calls answered with
the strategy's variables by a custom getter), the same initial values (built in TF1 graph mode
exactly as the trainer builds them, before TF 2 behaviour is switched back on), the same data order
(data.GlobalBatchSharder), the same global batch and plain SGD. The chief writes metrics.jsonl,
params.npz and summary.json as our chief does, so the benchmark reads both alike. TF 2 only.
"""

import json
import os
import runpy
import sys
import time

from absl import app, flags

from parallel_tf import compat
from parallel_tf.cli import exit_config_error, parse_flags_or_exit
from parallel_tf.cluster import reachability
from parallel_tf.cluster.config import check_shardable
from parallel_tf.data.sharding import GlobalBatchSharder
from parallel_tf.errors import ConfigError
from parallel_tf.launch import processes
from parallel_tf.launch.launcher import free_loopback_addresses, resolve_recipe
from parallel_tf.tools import runs
from parallel_tf.training import outputs, run_flags
from parallel_tf.training import settings as settings_lib

STRATEGIES = ("mirrored", "parameter_server")
FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_enum("strategy", None, STRATEGIES, "Which of TensorFlow's strategies.")
    flags.DEFINE_integer("num_workers", 1, "Worker processes.", lower_bound=1)
    flags.DEFINE_string("logdir", None, "Where the chief writes metrics.jsonl, params.npz and summary.json.")
    flags.DEFINE_string("cluster", None, "Set by the launching process: the tasks' addresses, as JSON.")
    flags.DEFINE_string("job_name", None, "Set by the launching process: chief, ps or worker.")
    flags.DEFINE_integer("task_index", 0, "Set by the launching process.")
    run_flags.define_recipe_flag()
    run_flags.define_run_flags()


def main(argv):
    try:
        if FLAGS.strategy is None or FLAGS.logdir is None:
            raise ConfigError("--strategy and --logdir are required")
        if FLAGS.optimizer != "sgd":
            raise ConfigError(f"--optimizer={FLAGS.optimizer}: the peers train with plain SGD only")
        recipe_path = resolve_recipe(FLAGS.recipe)
        recipe = load_recipe(recipe_path)  # TensorFlow is not imported yet (compat.py)
        run_flags.define_data_flags(list(recipe.datasets))
        parse_flags_or_exit(sys.argv)  # the recipe's and the data flags, now that they exist
        if FLAGS.job_name is None:
            sys.exit(launch(recipe_path, sys.argv[1:]))
        train(recipe)
    except ConfigError as e:
        exit_config_error(str(e))


def launch(recipe_path, given_flags):
    """Starts the tasks, each with the flags given here, on free loopback ports; returns the exit code."""
    num_servers = 2 if FLAGS.strategy == "parameter_server" else 0  # the coordinator (chief) and one ps
    addresses = free_loopback_addresses(num_servers + FLAGS.num_workers)
    jobs = {"worker": addresses[num_servers:]}
    if num_servers:
        jobs.update(chief=addresses[:1], ps=addresses[1:2])
    check_shardable(FLAGS.global_batch_size, FLAGS.num_workers)
    if any(os.path.exists(os.path.join(FLAGS.logdir, name)) for name in ("metrics.jsonl", "summary.json")):
        raise ConfigError(f"--logdir={FLAGS.logdir} already holds a run; choose another")
    os.makedirs(FLAGS.logdir, exist_ok=True)
    tasks = [
        (
            f"{job}:{index}",
            [
                sys.executable,
                "-m",
                "parallel_tf.tools.tf_strategies",
                *given_flags,
                f"--recipe={recipe_path}",
                f"--cluster={json.dumps(jobs)}",
                f"--job_name={job}",
                f"--task_index={index}",
            ],
        )
        for job, members in jobs.items()
        for index in range(len(members))
    ]
    failed = processes.Cluster(tasks, cuda_devices={}).run()
    return 0 if failed is None else 2 if failed[1] == 2 else 1


def load_recipe(path):
    """The `RECIPE` a recipe file defines at module level (it runs `task.run(RECIPE)` only as __main__)."""
    recipe = runpy.run_path(path, run_name="recipe").get("RECIPE")
    if recipe is None:
        raise ConfigError(f"{path} defines no module-level RECIPE, which the peers need")
    return recipe


def train(recipe):
    """This task's part: serve (ps, or a worker of parameter_server), or train (the others)."""
    jobs = json.loads(FLAGS.cluster)
    job, index = FLAGS.job_name, FLAGS.task_index
    settings = settings_lib.run_settings(
        mode="single",
        job_name="worker",
        task_index=0,
        cluster=None,
        global_batch_size=FLAGS.global_batch_size,
        train_steps=FLAGS.train_steps,
        learning_rate=FLAGS.learning_rate,
        optimizer="sgd",
        seed=FLAGS.seed,
        logdir=FLAGS.logdir,
        dataset=FLAGS.dataset,
        data_dir=FLAGS.data_dir,
        log_every=FLAGS.log_every,
    )
    dataset = recipe.datasets[settings.dataset](settings)
    initial = initial_params(recipe, dataset, settings.seed)
    tf = compat.tensorflow_v2()
    cluster_spec = tf.train.ClusterSpec(jobs)
    if FLAGS.strategy == "parameter_server":
        if job != "chief":
            serve_until_chief_leaves(tf, cluster_spec, job, index, jobs["chief"][0])
            return
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            cluster_spec, task_type="chief", task_id=0, rpc_layer="grpc"
        )
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    else:
        os.environ["TF_CONFIG"] = json.dumps({"cluster": jobs, "task": {"type": job, "index": index}})
        ring = tf.distribute.experimental.CommunicationImplementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring)
        )
    with strategy.scope():
        variables = {
            name: tf.Variable(value, name=name.split(":")[0].replace("/", "_")) for name, value in initial.items()
        }
    step_fn = sgd_step(tf, strategy, recipe, dataset.num_classes, variables, settings.learning_rate)
    sharder = GlobalBatchSharder(len(dataset.train_x), settings.global_batch_size, FLAGS.num_workers, settings.seed)
    is_chief = (job, index) in (("chief", 0), ("worker", 0))  # the coordinator, or mirrored's worker 0
    loop = coordinate if FLAGS.strategy == "parameter_server" else all_reduce
    loop(tf, strategy, step_fn, dataset, sharder, settings, is_chief)
    if is_chief:
        finish(settings, variables)


def initial_params(recipe, dataset, seed):
    """{name: value} of the recipe's initial parameters, built as the trainer builds them (graph/model.py)."""
    from parallel_tf.graph.model import build_model, seed_everything

    tf = compat.tf
    with tf.Graph().as_default():
        seed_everything(seed)
        build_model(recipe, dataset)
        variables = tf.trainable_variables()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return dict(zip((v.name for v in variables), sess.run(variables), strict=True))


def sgd_step(tf, strategy, recipe, num_classes, variables, learning_rate):
    """A tf.function: each replica's gradient on its slice, all-reduced to the mean under the mirrored
    strategy, applied as plain SGD; returns the slice's loss."""
    by_name = {name.split(":")[0]: variable for name, variable in variables.items()}
    ordered = list(variables.values())
    mirrored = FLAGS.strategy == "mirrored"

    def strategy_variable(getter, name, *args, **kwargs):
        return by_name[name]

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            with compat.tf.variable_scope("model", custom_getter=strategy_variable):
                logits = recipe.model_fn(features, num_classes)
            loss = recipe.loss_fn(labels, logits)
        gradients = tape.gradient(loss, ordered)
        if mirrored:
            gradients = tf.distribute.get_replica_context().all_reduce("mean", gradients)
        for variable, gradient in zip(ordered, gradients, strict=True):
            variable.assign_sub(learning_rate * gradient)
        return loss

    @tf.function
    def step(features, labels):
        return strategy.run(replica_step, args=(features, labels))

    return step


def all_reduce(tf, strategy, step_fn, dataset, sharder, settings, chief):
    """MultiWorkerMirroredStrategy: every worker runs every step on its slice."""
    log = _Log(settings, chief)
    for step in range(settings.train_steps):
        rows = sharder.shard(step, FLAGS.task_index)
        loss = step_fn(tf.constant(dataset.train_x[rows]), tf.constant(dataset.train_y[rows]))
        log.maybe(step + 1, lambda loss=loss: float(strategy.experimental_local_results(loss)[0]))


def coordinate(tf, strategy, step_fn, dataset, sharder, settings, chief):
    """ParameterServerStrategy: the coordinator schedules each global batch's slices on any free worker."""
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    log = _Log(settings, chief)
    for step in range(settings.train_steps):
        for shard in range(FLAGS.num_workers):
            rows = sharder.shard(step, shard)
            loss = coordinator.schedule(
                step_fn, args=(tf.constant(dataset.train_x[rows]), tf.constant(dataset.train_y[rows]))
            )
        log.maybe(step + 1, lambda loss=loss: (coordinator.join(), float(loss.fetch()))[1])


class _Log:
    """The chief's metrics lines every --log_every steps; `loss()` waits for the step to be done."""

    def __init__(self, settings, chief):
        self.settings, self.chief = settings, chief
        self.interval_start = time.time()

    def maybe(self, done, loss):
        settings = self.settings
        if not self.chief or (done % settings.log_every and done != settings.train_steps):
            return
        value = loss()
        now = time.time()
        steps = settings.log_every if done % settings.log_every == 0 else done % settings.log_every
        rate = steps * settings.global_batch_size / (now - self.interval_start)
        outputs.append_metrics(settings.logdir, done, value, rate)
        print(f"step {done}/{settings.train_steps}  loss {value:.6f}  {rate:.0f} examples/sec", flush=True)
        self.interval_start = now


def finish(settings, variables):
    named = {name: variable.numpy() for name, variable in variables.items()}
    metrics = runs.read_metrics(settings.logdir)
    summary = {
        "strategy": FLAGS.strategy,
        "num_workers": FLAGS.num_workers,
        "global_batch_size": settings.global_batch_size,
        "train_steps": settings.train_steps,
        "learning_rate": settings.learning_rate,
        "seed": settings.seed,
        "last_logged_loss": metrics[-1]["loss"],  # the chief's slice; not our final_loss (the last global batch)
        "params_sha256": outputs.params_sha256(named),
        "tf_version": compat.tensorflow_v2().__version__,
    }
    outputs.write_results(settings.logdir, summary, named)


def serve_until_chief_leaves(tf, cluster_spec, job, index, chief_address):
    """A ps or worker of ParameterServerStrategy: serves the coordinator, and exits once it has come and gone."""
    tf.distribute.Server(cluster_spec, job_name=job, task_index=index, protocol="grpc", start=True)
    while not reachability.accepts(chief_address):
        time.sleep(reachability.POLL_SECS)
    while reachability.accepts(chief_address):
        time.sleep(reachability.POLL_SECS)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True))
