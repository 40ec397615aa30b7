"""Runs a whole cluster on this machine, one process per task, and watches over it.

    python -m parallel_tf.launch [--recipe=mnist] [--mode=sync|async|hierarchical|allreduce] [--num_workers=2]
                                 [--num_ps=1] [--num_groups=2] [--logdir=DIR] [--cluster_spec=FILE]
                                 [--max_restarts=K [--min_workers=K]] [--simulate_hosts=H [--groups=by_host]]
                                 [--link_rate=R [--link_delay=MS] [--link_loss=P]]
                                 [run and mode flags, e.g. --train_steps=100] [the recipe's own flags]

Picks free 127.0.0.1 ports (unless --cluster_spec is given), writes the spec it used into the
logdir, starts every task (ps, local_ps in hierarchical mode, worker), prefixes each output line
with its task, and waits. If any task fails, or on Ctrl-C / SIGTERM, it stops every other task
by PID and exits non-zero naming the task. Its run and mode flags (training/run_flags.py; --intra_op_threads: the
cores shared, local.py) and those it does not know (the recipe's own, e.g. --model=cnn) go to every task.
Rerun on the same --logdir after a crash resumes from the chief's latest checkpoint; --fresh starts over.
With --max_restarts=K the launcher does that itself when a task fails, up to K times (exit 2, a
mistake, never restarts); with --min_workers a sync or all-reduce restart goes on without the worker that failed.

On Linux the whole cluster runs in a private network namespace (--isolate_network, fence.py):
TensorFlow's servers accept unauthenticated graphs on every interface, and this keeps them unreachable.
Inside it, --simulate_hosts=H lays the cluster out on H simulated hosts (hosts.py), and --link_rate=R
shapes every host's link at R each way (each task on a host of its own unless H is given).

Deliberately free of TensorFlow and numpy, and so single-threaded until it starts the tasks: it only
manages processes, and the kernel lets only a single-threaded process enter a user namespace.
"""

import dataclasses
import os
import sys

from absl import app, flags

from parallel_tf.backports import shlex_join
from parallel_tf.cli import counted, exit_config_error, parse_flags_or_exit
from parallel_tf.cluster import addresses
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.launch import fence, hosts
from parallel_tf.launch.local import local_cluster, share_cores
from parallel_tf.launch.processes import say
from parallel_tf.launch.recipe_checks import check_task_flags, fetch_before_fencing
from parallel_tf.launch.restarts import run_with_restarts, task_commands
from parallel_tf.training import cluster_flags, modes, run_check, run_flags
from parallel_tf.training.logdir import default_logdir, prepare_logdir, remove_if_empty
from parallel_tf.training.options import link

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES_DIR = os.path.join(REPO_DIR, "recipes")

FLAGS = flags.FLAGS


def define_launcher_flags(flag_values=FLAGS):
    run_flags.define_recipe_flag(flag_values)
    run_flags.define_mode_flag(flag_values)
    run_flags.define_mode_option_flags(flag_values)
    run_flags.define_run_flags(flag_values)
    run_flags.define_logdir_flags(flag_values)
    cluster_flags.define_cluster_spec_flag(flag_values)
    cluster_flags.define_cluster_shape_flags(flag_values)
    flags.DEFINE_integer("num_workers", 2, "Worker processes to start.", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer(
        "simulate_hosts",
        0,
        "Run the cluster on this many simulated hosts: network namespaces on a private bridge, each with "
        "its own address, its tasks on the same port numbers as the other hosts' (hosts.py). 0: one host.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "max_restarts",
        0,
        "When a task fails (not a mistake: exit 2 never restarts), stop the others and restart the whole "
        "cluster from the chief's latest checkpoint, up to this many times.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "min_workers",
        None,
        "sync and allreduce, with --max_restarts: a worker that failed is left out of the restart, which goes on "
        "with the most workers left that the run's batch (and --microbatches) divide, if at least this many.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "isolate_network",
        "auto",
        ["auto", "on", "off"],
        "Run the cluster in a private network namespace with only loopback, unreachable from outside "
        "(auto: where the kernel allows it; on: or exit 2; off: plain 127.0.0.1 ports).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "fork_tasks",
        True,
        "Fork the tasks from one process that has loaded TensorFlow (launch/forkserver.py): a start costs one "
        "import, not one a task; none where PARALLEL_TF_WARM_SERVER names a warm fork server that takes the launch "
        "(launch/warm_server.py). Off: each task is a process of its own, as started by hand; so too with GPUs, "
        "and off Linux.",
        flag_values=flag_values,
    )
    run_flags.define_dry_run_flag("the tasks it would start, each command as it could be run by hand", flag_values)


@dataclasses.dataclass(frozen=True)
class Launch:
    """What a launch starts, once every check has passed: the cluster, the recipe, the logdir and the flags
    every task gets."""

    recipe_path: str
    cluster: cluster_lib.ClusterConfig
    run_dir: str
    common: list  # the flags every task gets: mode, logdir, the run and mode flags given, the recipe's own
    fenced: str  # how the cluster is exposed, as fence.fence_off says
    isolated: bool


def parse_launch_flags(argv):
    """The launcher's flags, wherever they stand: `--` only separates the flags the launcher passes to every task
    from its own, and a flag it defines is its own on either side (absl stops at `--`, which would leave
    `-- --mode=async` to the tasks while the launcher planned, named and checked a sync run). The flags it does
    not know stay in the returned argv, for the tasks."""
    return parse_flags_or_exit([arg for arg in argv if arg != "--"], known_only=True, command=__name__)


def main(argv):
    recipe_flags = argv[1:]
    made = None  # a default logdir this launch created, removed again if the start is refused
    try:
        launch = plan_launch(recipe_flags)
        made = None if FLAGS["logdir"].present or FLAGS.dry_run else launch.run_dir
        if FLAGS.dry_run:
            print_plan(launch)
            return
        moved_to = prepare_logdir(launch.run_dir, fresh=FLAGS.fresh, train_steps=FLAGS.train_steps)
        simulated = simulated_hosts(launch.cluster)
    except ConfigError as e:
        remove_if_empty(made)
        exit_config_error(str(e))
    except TaskFailure as e:
        remove_if_empty(made)
        say(f"error: {e}")
        sys.exit(1)
    say(launch.fenced)
    if moved_to:
        say(f"--fresh: moved the old {launch.run_dir} aside to {moved_to}")
    if launch.isolated:
        os.environ[addresses.PRIVATE_NETWORK_ENV] = "1"  # for the tasks: no exposure warnings
    if FLAGS.link_rate:
        os.environ[link.SHAPED_ENV] = FLAGS.link_rate  # for the tasks: their --link_rate is the network's
        delay = f", {FLAGS.link_delay:g} ms one way by {simulated.delay_by}" if FLAGS.link_delay else ""
        loss = f", {FLAGS.link_loss:.2%} of the packets lost" if FLAGS.link_loss else ""
        shaped = f"shaped at {FLAGS.link_rate} each way{delay}{loss}"
        say(f"each of the {len(simulated.holders)} simulated hosts' interfaces is {shaped}")
        if simulated.delay_by:
            os.environ[link.DELAY_BY_ENV] = simulated.delay_by
        if simulated.delay_line:
            line = f"{hosts.DELAY_LINE_NAME} (pid {simulated.delay_line.pid})"
            say(f"{line} holds each packet a host receives for {FLAGS.link_delay:g} ms")
    try:
        code = run_with_restarts(launch.cluster, launch.recipe_path, launch.run_dir, launch.common, simulated)
    except SystemExit as stopped:  # Ctrl-C or SIGTERM: every task has been stopped
        code = stopped.code
    finally:
        if simulated:
            simulated.stop()
    if code not in (0, 2):
        run_dir = launch.run_dir
        say(resume_hint(run_dir, FLAGS["logdir"].present, checkpointed=os.path.exists(f"{run_dir}/checkpoint")))
    sys.exit(code)


def plan_launch(recipe_flags):
    """Every check a launch makes before it starts, downloads or writes anything (--dry_run stops here): the
    flags, the cluster, the run's composition, the tasks' own check of their flags (the recipe's, the data, a
    logdir to resume). Enters the private network, where the ports are picked; a default logdir is created
    (not in a dry run), so two launches in the same second cannot share it."""
    recipe_path = resolve_recipe(FLAGS.recipe)
    modes.check_shape_flags(FLAGS.mode)
    run_check.check_flag_scopes(FLAGS.mode, run_check.DECLARED_SCOPES)
    spec = cluster_lib.from_spec_file(FLAGS.cluster_spec) if FLAGS.cluster_spec else None
    if spec:
        check_spec_counts(spec)
    num_groups = groups_count()
    fetch_before_fencing(recipe_flags, recipe_path, FLAGS.dry_run)
    isolated, fenced = fence.fence_off(FLAGS.isolate_network, spec)
    check_simulated_hosts(isolated, spec)
    if FLAGS.simulate_hosts or FLAGS.link_rate:  # with a link alone, every task on a host of its own
        cluster = hosts.layout(FLAGS.mode, FLAGS.num_ps, FLAGS.num_workers, num_groups, FLAGS.simulate_hosts)
    else:
        cluster = spec or local_cluster(FLAGS.mode, FLAGS.num_ps, FLAGS.num_workers, num_groups)
    modes.check_cluster(FLAGS.mode, cluster)
    run_check.check_run_fits(cluster, FLAGS.mode)
    check_min_workers(FLAGS.min_workers, cluster)
    share_cores(FLAGS["intra_op_threads"], cluster.num_workers)
    run_dir = FLAGS.logdir or default_logdir(recipe_name(recipe_path), FLAGS.mode, create=not FLAGS.dry_run)
    common = [f"--mode={FLAGS.mode}", f"--logdir={run_dir}", *run_check.given_task_flags(FLAGS.mode), *recipe_flags]
    try:  # the chief's check is of the run this launch makes: with --fresh, not of the one it moves aside
        check_task_flags(cluster, recipe_path, [*common, *(["--fresh"] if FLAGS.fresh else [])])
    except (ConfigError, TaskFailure):
        if not FLAGS["logdir"].present and not FLAGS.dry_run:
            remove_if_empty(run_dir)
        raise
    return Launch(recipe_path, cluster, run_dir, common, fenced, isolated)


def check_spec_counts(spec):
    """A --cluster_spec names every task: a count flag given beside it that says otherwise is refused, not
    silently overridden."""
    counts = {
        "num_workers": (spec.num_workers, "worker"),
        "num_ps": (spec.num_ps, "parameter server"),
        "num_groups": (len(spec.groups), "group"),
    }
    for flag, (count, noun) in counts.items():
        if FLAGS[flag].present and FLAGS[flag].value != count:
            raise ConfigError(
                f"--{flag}={FLAGS[flag].value} contradicts --cluster_spec={FLAGS.cluster_spec}, which has "
                f"{counted(count, noun)}: the spec names every task; drop --{flag}"
            )


def print_plan(launch):
    """--dry_run: what the launch would start, each task's command as it could be run by hand."""
    say(launch.fenced)
    say(f"--dry_run: every check passed; nothing was started or written. It would start, in {launch.run_dir}:")
    spec_path = os.path.join(launch.run_dir, "cluster_spec.json")
    for name, command in task_commands(launch.cluster, launch.recipe_path, spec_path, launch.common):
        say(f"  {name}: {shlex_join(command)}")


def resume_hint(run_dir, logdir_given, checkpointed=True):
    """How to go on after a failure or Ctrl-C: a default logdir has a new name on every run, so the
    same command resumes only if it names this one; without a checkpoint there is nothing to resume."""
    if not checkpointed:
        return f"nothing was checkpointed in {run_dir}: run the same command to start again"
    logdir = "" if logdir_given else f" with --logdir={run_dir}"
    return f"to resume from the latest checkpoint in {run_dir}, run the same command{logdir}"


def groups_count():
    """--num_groups, or with --groups=by_host one group per simulated host."""
    modes.check_layout(FLAGS.mode, bool(FLAGS.simulate_hosts), "a cluster without --simulate_hosts")
    return FLAGS.simulate_hosts if FLAGS.groups == "by_host" else FLAGS.num_groups


def check_simulated_hosts(isolated, spec):
    """Simulated hosts, and the links that shape them, are built inside the launcher's private network, on
    a layout of their own."""
    flag = "--simulate_hosts" if FLAGS.simulate_hosts else "--link_rate" if FLAGS.link_rate else None
    if not flag:
        return
    if spec:
        raise ConfigError(f"{flag} lays the cluster out itself; it does not take --cluster_spec")
    if not isolated:
        raise ConfigError(
            f"{flag} builds its hosts inside the launcher's private network: it needs "
            "--isolate_network=auto|on where the kernel allows it"
        )


def simulated_hosts(cluster):
    """The simulated hosts of --simulate_hosts (or, with a link alone, one a task), shaped by --link_rate."""
    if not (FLAGS.simulate_hosts or FLAGS.link_rate):
        return None
    shaped = hosts.Link(FLAGS.link_rate, FLAGS.link_delay, FLAGS.link_loss) if FLAGS.link_rate else None
    return hosts.SimulatedHosts(FLAGS.simulate_hosts or len(cluster.tasks()), shaped)


def check_min_workers(min_workers, cluster):
    if min_workers is None:
        return
    if FLAGS.mode not in modes.LOCKSTEP:
        raise ConfigError(
            f"--min_workers applies only to --mode={'|'.join(modes.LOCKSTEP)}, not {FLAGS.mode}: "
            "a resume must keep its worker count"
        )
    if not FLAGS.max_restarts:
        raise ConfigError("--min_workers applies with --max_restarts: only a restart can go on with fewer workers")
    if min_workers > cluster.num_workers:
        raise ConfigError(f"--min_workers={min_workers} is more than the {cluster.num_workers} workers")


def resolve_recipe(recipe):
    path = recipe if recipe.endswith(".py") else os.path.join(RECIPES_DIR, f"{recipe}.py")
    if not os.path.isfile(path):
        available = sorted(name[:-3] for name in os.listdir(RECIPES_DIR) if name.endswith(".py"))
        raise ConfigError(f"--recipe={recipe}: no such recipe (available: {', '.join(available)})")
    return os.path.abspath(path)


def recipe_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def run_command_line():
    """`python -m parallel_tf.launch`."""
    define_launcher_flags()
    app.run(main, flags_parser=parse_launch_flags)
