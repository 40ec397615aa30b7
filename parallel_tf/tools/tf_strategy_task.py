"""One task of a peer run (tf_strategies.py): a ps or a parameter_server worker serves; the chief or a
mirrored worker trains the recipe's model with TensorFlow 2's strategy and, as chief, writes what our
chief writes. Imported by the task only: numpy and TensorFlow start threads, and the launching process
must stay single-threaded to enter a network namespace for --link_rate."""

import json
import os
import time

from absl import flags

from parallel_tf import compat
from parallel_tf.backports import zip_strict
from parallel_tf.cluster import reachability
from parallel_tf.data.sharding import GlobalBatchSharder
from parallel_tf.tools import runs
from parallel_tf.training import outputs
from parallel_tf.training import settings as settings_lib
from parallel_tf.training.options import link

FLAGS = flags.FLAGS


def train(recipe):
    """This task's part: serve (ps, or a worker of parameter_server), or train (the others)."""
    jobs = json.loads(FLAGS.cluster)
    job, index = FLAGS.job_name, FLAGS.task_index
    if FLAGS.at_defaults:  # before anything loads TensorFlow
        compat.at_tensorflows_defaults()
    else:
        compat.pin_before_loading(FLAGS.intra_op_threads, FLAGS.kernels)
    settings = plain_settings()
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


def plain_settings():
    """The run's flags as Settings of one plain process with SGD: what the peers and the floor read of them."""
    return settings_lib.run_settings(
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
            return dict(zip_strict((v.name for v in variables), sess.run(variables)))


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
        for variable, gradient in zip_strict(ordered, gradients):
            variable.assign_sub(learning_rate * gradient)
        return loss

    @tf.function
    def step(features, labels):
        return strategy.run(replica_step, args=(features, labels))

    return step


def all_reduce(tf, strategy, step_fn, dataset, sharder, settings, chief):
    """MultiWorkerMirroredStrategy: every worker runs every step on its slice."""
    log = Log(settings, chief)
    for step in range(settings.train_steps):
        rows = sharder.shard(step, FLAGS.task_index)
        loss = step_fn(tf.constant(dataset.train_x[rows]), tf.constant(dataset.train_y[rows]))
        log.maybe(step + 1, lambda loss=loss: float(strategy.experimental_local_results(loss)[0]))


def coordinate(tf, strategy, step_fn, dataset, sharder, settings, chief):
    """ParameterServerStrategy: the coordinator schedules each global batch's slices on any free worker."""
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    log = Log(settings, chief)
    for step in range(settings.train_steps):
        for shard in range(FLAGS.num_workers):
            rows = sharder.shard(step, shard)
            loss = coordinator.schedule(
                step_fn, args=(tf.constant(dataset.train_x[rows]), tf.constant(dataset.train_y[rows]))
            )
        log.maybe(step + 1, lambda loss=loss: (coordinator.join(), float(loss.fetch()))[1])


class Log:
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
        "link": link.described(FLAGS.link_rate, FLAGS.link_delay, FLAGS.link_loss) if FLAGS.link_rate else None,
        "last_logged_loss": metrics[-1]["loss"],  # the chief's slice; not our final_loss (the last global batch)
        "params_sha256": outputs.params_sha256(named),
        "tf_version": compat.tensorflow_v2().__version__,
        "at_tensorflows_defaults": FLAGS.at_defaults,
        "kernels": compat.kernels(),
    }
    outputs.write_results(settings.logdir, summary, named)


def serve_until_chief_leaves(tf, cluster_spec, job, index, chief_address):
    """A ps or worker of ParameterServerStrategy: serves the coordinator, and exits once it has come and gone."""
    tf.distribute.Server(cluster_spec, job_name=job, task_index=index, protocol="grpc", start=True)
    while not reachability.accepts(chief_address):
        time.sleep(reachability.POLL_SECS)
    while reachability.accepts(chief_address):
        time.sleep(reachability.POLL_SECS)
