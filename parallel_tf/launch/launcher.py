"""Runs a whole cluster on this machine, one process per task, and watches over it.

    python -m parallel_tf.launch [--recipe=mnist] [--mode=sync|async|hierarchical|allreduce] [--num_workers=2]
                                 [--num_ps=1] [--num_groups=2] [--logdir=DIR] [--cluster_spec=FILE]
                                 [--max_restarts=K [--min_workers=K]] [--simulate_hosts=H [--groups=by_host]]
                                 [--link_rate=R [--link_delay=MS] [--link_loss=P]]
                                 [run and mode flags, e.g. --train_steps=100] [the recipe's own flags]

Picks free 127.0.0.1 ports (unless --cluster_spec is given), writes the spec it used into the
logdir, starts every task (ps, local_ps in hierarchical mode, worker), prefixes each output line
with its task, and waits. If any task fails, or on Ctrl-C / SIGTERM, it stops every other task
by PID and exits non-zero naming the task. The run and mode flags it was given (training/run_flags.py) and the
flags it does not know (the recipe's own, e.g. --model=cnn) go to every task.
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
import json
import os
import socket
import subprocess
import sys

from absl import app, flags

from parallel_tf.backports import removeprefix, shlex_join
from parallel_tf.cli import CHECKED_DATASET, UNKNOWN_FLAG, counted, exit_config_error, parse_flags_or_exit, unknown_flag
from parallel_tf.cluster import addresses
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.data import download
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.launch import fence, hosts
from parallel_tf.launch.processes import Cluster, describe_exit, say
from parallel_tf.training import modes, run_check, run_flags
from parallel_tf.training.logdir import default_logdir, prepare_logdir, remove_if_empty
from parallel_tf.training.options import link

CHECK_TIMEOUT_SECS = 120
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES_DIR = os.path.join(REPO_DIR, "recipes")

FLAGS = flags.FLAGS


def define_launcher_flags(flag_values=FLAGS):
    run_flags.define_recipe_flag(flag_values)
    run_flags.define_mode_flag(flag_values)
    run_flags.define_mode_option_flags(flag_values)
    run_flags.define_run_flags(flag_values)
    run_flags.define_logdir_flags(flag_values)
    run_flags.define_cluster_spec_flag(flag_values)
    run_flags.define_cluster_shape_flags(flag_values)
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


def check_task_flags(cluster, recipe_path, common):
    """Runs the chief's command with --check_flags before anything is started or written, so a flag
    the tasks would refuse (the recipe's own, an unknown one, a bad value) is one line and exit 2 here,
    in the recipe's own words, in well under a second: a task checks its flags before it imports
    TensorFlow. The cluster goes by TF_CONFIG, as its spec file is not written yet; without one (None),
    the command is the one plain process's."""
    environment = dict(os.environ)
    if cluster:
        environment["TF_CONFIG"] = json.dumps({**json.loads(cluster.to_json()), "task": {"type": "worker", "index": 0}})
    command = [sys.executable, recipe_path, *common, "--check_flags"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECS)
    if done.returncode == 2:
        said = (done.stderr + done.stdout).strip().splitlines() or ["the chief's command refused its flags (exit 2)"]
        raise ConfigError(with_suggestion(removeprefix(said[-1], "error: ")))
    if done.returncode:
        raise TaskFailure(f"checking the tasks' flags failed (exit {done.returncode}): {done.stderr.strip()}")


def with_suggestion(refusal):
    """The recipe's refusal of a flag it does not know, with the launcher's flags it may have meant beside the
    recipe's (the recipe's own parser knows only the recipe's: --num_worker gets no suggestion there)."""
    unknown = UNKNOWN_FLAG.match(refusal)
    if not unknown or ":" in refusal:  # a flag the recipe has a hint for: its words
        return refusal
    suggested = [removeprefix(flag, "--") for flag in (unknown[2] or "").split(" or ") if flag]
    return unknown_flag(unknown[1], list(FLAGS), suggested=suggested)


def fetch_before_fencing(recipe_flags, recipe_path, dry_run=False):
    """--download, done by the launcher before it enters its private network (not in a dry run): inside it the tasks
    reach only each other, so their own downloads could not connect. The tasks then find every file
    with its checksum in --data_dir and fetch nothing. The data flags are the recipe's; a value they
    would refuse is left for the tasks to report. Without --dataset, the recipe's own default is asked
    of it (--check_flags says the dataset it would read)."""
    data = flags.FlagValues()
    flags.DEFINE_string("dataset", None, "", flag_values=data)
    flags.DEFINE_string("data_dir", None, "", flag_values=data)
    flags.DEFINE_bool("download", False, "", flag_values=data)
    flags.DEFINE_string("download_url", None, "", flag_values=data)
    try:
        data(["launch", *recipe_flags], known_only=True)
    except flags.Error:
        return
    if not (data.download and data.data_dir):
        return
    dataset = data.dataset or recipes_dataset(recipe_path, recipe_flags)
    if dataset in download.SOURCES and dry_run:
        say(f"--dry_run: would download {dataset} into {data.data_dir} before the cluster starts")
    elif dataset in download.SOURCES:
        say(f"downloading {dataset} into {data.data_dir} before the cluster starts")
        download.fetch(dataset, data.data_dir, data.download_url, say=say)


def recipes_dataset(recipe_path, recipe_flags):
    """The dataset the recipe's tasks read with these flags, as its --check_flags says; None if it
    refuses them (the chief's check reports that, in its words)."""
    command = [sys.executable, recipe_path, *recipe_flags, "--check_flags"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECS)
    said = [
        removeprefix(line, CHECKED_DATASET) for line in done.stdout.splitlines() if line.startswith(CHECKED_DATASET)
    ]
    return said[-1] if done.returncode == 0 and said else None


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
        counted(len(hosts), job, plural=None if job == "worker" else job) for job, hosts in cluster.jobs.items()
    )


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


def resolve_recipe(recipe):
    path = recipe if recipe.endswith(".py") else os.path.join(RECIPES_DIR, f"{recipe}.py")
    if not os.path.isfile(path):
        available = sorted(name[:-3] for name in os.listdir(RECIPES_DIR) if name.endswith(".py"))
        raise ConfigError(f"--recipe={recipe}: no such recipe (available: {', '.join(available)})")
    return os.path.abspath(path)


def recipe_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def local_cluster(mode, num_ps, num_workers, num_groups):
    """A spec on free loopback ports; in hierarchical mode worker i joins group i mod G, as in the seed."""
    num_ps, num_groups = modes.server_counts(mode, num_ps, num_groups)
    if num_groups > num_workers:
        raise ConfigError(f"--num_groups={num_groups} is more than --num_workers={num_workers}")
    free = free_loopback_addresses(num_ps + num_groups + num_workers)
    return cluster_lib.assign_jobs(free, num_ps, num_groups, "generated spec")


def free_loopback_addresses(count):
    """`count` distinct free 127.0.0.1 ports, found by binding port 0 (all held until all are found)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()


def visible_gpus():
    """GPU ids the launcher may hand out: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listing.stdout.splitlines()) if line.startswith("GPU ")]


def gpu_environments(cluster, gpus=None):
    """Per-task CUDA_VISIBLE_DEVICES: worker i gets GPU i mod G, a ps (central or local) none. {} without GPUs."""
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        return {}
    environments = {f"{job}:{i}": "" for job in cluster_lib.SERVER_JOBS for i in range(len(cluster.jobs.get(job, ())))}
    environments.update({f"worker:{i}": gpus[i % len(gpus)] for i in range(cluster.num_workers)})
    return environments


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


def run_command_line():
    """`python -m parallel_tf.launch`."""
    define_launcher_flags()
    app.run(main, flags_parser=parse_launch_flags)
