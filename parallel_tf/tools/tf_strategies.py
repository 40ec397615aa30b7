"""TensorFlow's own distribution strategies training a recipe's model: the benchmark's peers; and the floor.

    python -m parallel_tf.tools.tf_strategies --strategy=mirrored|parameter_server|floor --num_workers=N
        --recipe=mnist --logdir=DIR [--global_batch_size ... run flags] [the recipe's flags]

mirrored          MultiWorkerMirroredStrategy: sync all-reduce (RING), one process per worker, each
                  computing on its slice of the global batch; every worker applies the mean gradient.
parameter_server  ParameterServerStrategy: async; a coordinator (the chief) schedules each global
                  batch's N slices on N worker processes, which apply their gradient to 1 ps.
floor             No strategy: what a parameter-server sync step made in a session run of its own
                  cannot go below. Each of N workers reads the parameters from 1 ps, computes its
                  gradients and writes them back, one session run a step, and trains nothing
                  (floor_task.py).

The two strategies train what our runs train: the recipe's model function (its get_variable calls
answered with the strategy's variables by a custom getter), the same initial values (built in TF1
graph mode exactly as the trainer builds them, before TF 2 behaviour is switched back on), the same
data order (data.GlobalBatchSharder), the same global batch and plain SGD. The chief writes metrics.jsonl,
params.npz and summary.json as our chief does, so the benchmark reads both alike. TF 2 only.

They run at TensorFlow's defaults (--at_defaults, the default): TensorFlow loaded as it loads by itself (its
contraction kernel, oneDNN's ops, a thread a core) and the recipe's layers in its own ops (tf.matmul,
tf.nn.conv2d), which is what a user who picks TensorFlow's strategy gets. --noat_defaults runs them in this
package's kernels instead (--kernels, --intra_op_threads, as our runs), to measure the distribution alone.

With --link_rate (and --link_delay) the peers run on the network ours do: every task on a simulated
host of its own in a private network, each host's interface shaped as the launcher shapes it
(launch/hosts.py), so the bench compares both on the same link. What a task does is in
tf_strategy_task.py (floor_task.py for the floor); this module starts the tasks and stays free of
numpy and TensorFlow.
"""

import json
import os
import runpy
import sys

from absl import app, flags

from parallel_tf import compat
from parallel_tf.cli import exit_config_error, parse_flags_or_exit
from parallel_tf.cluster.config import check_shardable
from parallel_tf.errors import ConfigError
from parallel_tf.launch import fence, hosts, processes
from parallel_tf.launch.launcher import resolve_recipe
from parallel_tf.launch.local import free_loopback_addresses
from parallel_tf.training import run_flags
from parallel_tf.training.options import link

STRATEGIES = ("mirrored", "parameter_server", "floor")
FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_enum("strategy", None, STRATEGIES, "Which of TensorFlow's strategies.")
    flags.DEFINE_integer("num_workers", 1, "Worker processes.", lower_bound=1)
    flags.DEFINE_string("logdir", None, "Where the chief writes metrics.jsonl, params.npz and summary.json.")
    flags.DEFINE_string("cluster", None, "Set by the launching process: the tasks' addresses, as JSON.")
    flags.DEFINE_string("job_name", None, "Set by the launching process: chief, ps or worker.")
    flags.DEFINE_integer("task_index", 0, "Set by the launching process.")
    flags.DEFINE_bool(
        "at_defaults",
        True,
        "TensorFlow as it loads by itself (its kernels, oneDNN's ops, its thread count) and the recipe's layers in "
        "its own ops: what a user who picks it gets. --noat_defaults: this package's kernels (--kernels).",
    )
    run_flags.define_recipe_flag()
    run_flags.define_run_flags()
    link.OPTION.define_flags(link.__name__)


def main(argv):
    try:
        if FLAGS.strategy is None or FLAGS.logdir is None:
            raise ConfigError("--strategy and --logdir are required")
        if FLAGS.optimizer != "sgd":
            raise ConfigError(f"--optimizer={FLAGS.optimizer}: the peers train with plain SGD only")
        for shaping in ("link_delay", "link_loss"):  # as the launcher's rules say it
            if FLAGS[shaping].value and not FLAGS.link_rate:
                raise ConfigError(f"--{shaping} applies only with --link_rate")
        for pinned in ("kernels", "intra_op_threads"):  # the floor is ours: our kernels, as our runs
            if FLAGS.strategy != "floor" and FLAGS.at_defaults and FLAGS[pinned].present:
                raise ConfigError(f"--{pinned} does not apply at TensorFlow's defaults: add --noat_defaults")
        launching = FLAGS.job_name is None
        if launching and FLAGS.link_rate:
            enter_private_network()  # before the recipe: its imports start threads, after which no process can
        recipe_path = resolve_recipe(FLAGS.recipe)
        recipe = load_recipe(recipe_path)  # TensorFlow is not imported yet (compat.py)
        run_flags.define_data_flags(list(recipe.datasets))
        parse_flags_or_exit(sys.argv)  # the recipe's and the data flags, now that they exist
        if launching:
            sys.exit(launch(recipe_path, sys.argv[1:]))
        if FLAGS.strategy == "floor":  # a task only, as below
            compat.pin_before_loading(FLAGS.intra_op_threads, FLAGS.kernels)
            from parallel_tf.tools import floor_task

            floor_task.run(recipe)
            return
        from parallel_tf.tools import tf_strategy_task  # a task only: see its docstring

        tf_strategy_task.train(recipe)
    except ConfigError as e:
        exit_config_error(str(e))


def enter_private_network():
    """The launcher's fence, which the simulated hosts of a link are built in; ConfigError where it cannot be."""
    why_not = fence.enter_private_network()
    if why_not:
        raise ConfigError(f"--link_rate builds its hosts inside a private network namespace, and cannot: {why_not}")


def launch(recipe_path, given_flags):
    """Starts the tasks, each with the flags given here, on free loopback ports or, with a link, each on a
    simulated host of its own; returns the exit code."""
    num_servers = {"parameter_server": 2, "floor": 1}.get(FLAGS.strategy, 0)  # the coordinator (chief); one ps
    count = num_servers + FLAGS.num_workers
    check_shardable(FLAGS.global_batch_size, FLAGS.num_workers)
    if any(os.path.exists(os.path.join(FLAGS.logdir, name)) for name in ("metrics.jsonl", "summary.json")):
        raise ConfigError(f"--logdir={FLAGS.logdir} already holds a run; choose another")
    simulated = (
        hosts.SimulatedHosts(count, hosts.Link(FLAGS.link_rate, FLAGS.link_delay, FLAGS.link_loss))
        if FLAGS.link_rate
        else None
    )
    if simulated and simulated.delay_by:
        os.environ[link.DELAY_BY_ENV] = simulated.delay_by  # for the tasks' summary
    addresses = hosts.one_host_each(count) if simulated else free_loopback_addresses(count)
    jobs = {"worker": addresses[num_servers:]}
    if num_servers:
        jobs["ps"] = addresses[num_servers - 1 : num_servers]
    if num_servers == 2:
        jobs["chief"] = addresses[:1]
    os.makedirs(FLAGS.logdir, exist_ok=True)
    members = [(job, index, address) for job, named in jobs.items() for index, address in enumerate(named)]
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
        for job, index, _ in members
    ]
    namespaces = {}
    if simulated:
        processes.say(f"each of the {count} simulated hosts' interfaces is shaped at {FLAGS.link_rate} each way")
        namespaces = {f"{job}:{index}": simulated.namespace(hosts.host_of(address)) for job, index, address in members}
    try:
        failed = processes.Cluster(tasks, cuda_devices={}, namespaces=namespaces).run()
    finally:
        if simulated:
            simulated.stop()
    return 0 if failed is None else 2 if failed[1] == 2 else 1


def load_recipe(path):
    """The `RECIPE` a recipe file defines at module level (it runs `task.run(RECIPE)` only as __main__)."""
    recipe = runpy.run_path(path, run_name="recipe").get("RECIPE")
    if recipe is None:
        raise ConfigError(f"{path} defines no module-level RECIPE, which the peers need")
    return recipe


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True))
