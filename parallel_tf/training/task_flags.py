"""Every flag, defined once, in groups the entry points adopt, and their translation into `Settings`.

    group             defined by                      flags
    cluster           tasks                           --job_name --task_index --ps_hosts --worker_hosts
                                                      --cluster_resolver --port_base
    cluster spec      tasks, launcher                 --cluster_spec
    cluster shape     tasks, launcher, k8s            --num_ps --num_groups
    mode              tasks, launcher, k8s            --mode
    mode options      tasks, launcher, k8s, study     --push_every ... and every technique's flags
    run               tasks, launcher, k8s, study,    --global_batch_size --train_steps --seed ...
                      bench, peers
    logdir            tasks, launcher                 --logdir --fresh
    recipe            launcher, k8s, study, peers     --recipe
    data              tasks, peers (per recipe)       --dataset --data_dir --download --download_url

The launcher, bench and study pass the run flags a user gave (and the launcher and study the
mode options) on to the tasks they start (`given_task_flags`), so a flag has one definition and
one default everywhere.
Out-of-range values and contradictions become a `ConfigError`; entry points print it as one line
and exit 2 (see cli.py).
"""

import dataclasses
import functools
import math
import os

from absl import flags

from parallel_tf import compat
from parallel_tf.cli import define_float, validate_by_parsing
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.cluster import slurm
from parallel_tf.errors import ConfigError
from parallel_tf.graph.learning_rates import Schedule
from parallel_tf.graph.model import OPTIMIZERS
from parallel_tf.training import options, profiling, rules, techniques
from parallel_tf.training.train_graph import MODES

FLAGS = flags.FLAGS
NO_CLUSTER = options.NO_CLUSTER
RESOLVERS = ("slurm", "tfjob")

# Every flag that changes what a run computes belongs to a declaration (a technique or an option), which says
# the modes it applies to: a flag set where it does not apply is an error, because a flag silently ignored is
# a wrong experiment the user believes they ran. Mode options apply to cluster modes; run options to the one
# plain process too.
MODE_OPTION_SCOPES = {**options.flag_scopes(run_options=False), **techniques.flag_scopes()}
RUN_OPTION_SCOPES = options.flag_scopes(run_options=True)
DECLARED_SCOPES = {**MODE_OPTION_SCOPES, **RUN_OPTION_SCOPES}
FLAG_SCOPES = {"job_name": MODES, "task_index": MODES, "mode": MODES, **DECLARED_SCOPES}
DECLARATIONS = (*(t.TECHNIQUE for t in techniques.TECHNIQUES), *(o.OPTION for o in options.OPTIONS))
# The run flags of every mode, besides the run options.
CORE_RUN_FLAGS = (
    "global_batch_size",
    "train_steps",
    "learning_rate",
    "optimizer",
    "seed",
    "log_every",
    "snapshot_every",
    "checkpoint_every",
    "startup_timeout",
    "operation_timeout",
    "trace_steps",
    "nan_guard",
    "intra_op_threads",
)


def define_task_flags(dataset_names, flag_values=FLAGS):
    """Every flag of a task; `dataset_names` are the recipe's datasets, the first the default."""
    define_cluster_flags(flag_values)
    define_cluster_spec_flag(flag_values)
    define_cluster_shape_flags(flag_values)
    define_mode_flag(flag_values)
    define_mode_option_flags(flag_values)
    define_run_flags(flag_values)
    define_logdir_flags(flag_values)
    define_data_flags(dataset_names, flag_values)


def define_cluster_flags(flag_values=FLAGS):
    flags.DEFINE_bool(
        "check_flags",
        False,
        "Check this task's flags and cluster, then exit: 0 if it would start, 2 and the one-line error if not. "
        "The launcher runs the chief's command so before it starts any task.",
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "job_name", None, ["ps", "local_ps", "worker"], "This process's job in the cluster.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "task_index",
        0,
        "This process's index within its job; worker 0 is the chief.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "ps_hosts",
        [],
        "Comma-separated host:port of the parameter servers (instead of a spec).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "worker_hosts", [], "Comma-separated host:port of the workers (instead of a spec).", flag_values=flag_values
    )
    flags.DEFINE_enum(
        "cluster_resolver",
        None,
        RESOLVERS,
        "Build the cluster from a cluster manager's environment instead of a spec: slurm reads the srun "
        "step's variables (SLURM_PROCID, SLURM_STEP_NODELIST, ...), the first --num_ps ranks being the ps "
        "tasks; tfjob reads Kubeflow's TF_CONFIG, whose PS tasks after the first --num_ps are the local ps.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "failure_exit_code",
        1,
        "Exit code of a failure at run time (a lost peer, a timeout): one a restart can cure. Kubeflow's "
        "ExitCode restart policy retries only 128-255; k8s manifests set 138. A mistake always exits 2.",
        lower_bound=1,
        upper_bound=255,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "port_base",
        8888,
        "With --cluster_resolver: each task listens on this port plus its index on its node.",
        lower_bound=1,
        upper_bound=65535,
        flag_values=flag_values,
    )


def define_cluster_spec_flag(flag_values=FLAGS):
    flags.DEFINE_string(
        "cluster_spec",
        None,
        'JSON file: {"cluster": {"ps": ["host:port"], "worker": ["host:port", ...]}}; the launcher picks free '
        "ports without one.",
        flag_values=flag_values,
    )


def define_cluster_shape_flags(flag_values=FLAGS):
    """How many tasks of each server job: the launcher starts them; a resolver assigns them ranks."""
    flags.DEFINE_integer("num_ps", 1, "(Central) parameter server tasks.", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer(
        "num_groups",
        2,
        "hierarchical: worker groups, each with a local ps; worker i joins group i mod G.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "groups",
        "interleaved",
        ["interleaved", "by_host"],
        "hierarchical: interleaved puts worker i in group i mod --num_groups; by_host makes one group per "
        "host (a Slurm node, or a --simulate_hosts host), its local ps and its workers on that host.",
        flag_values=flag_values,
    )


def define_mode_flag(flag_values=FLAGS):
    flags.DEFINE_enum("mode", "sync", MODES, "Distributed training mode.", flag_values=flag_values)


def define_logdir_flags(flag_values=FLAGS):
    flags.DEFINE_string(
        "logdir",
        None,
        "Where the chief writes its outputs; default runs/<recipe>-<mode>-<time>.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "fresh",
        False,
        "Start over: move an existing --logdir aside (never deleted), not resume it.",
        flag_values=flag_values,
    )


def define_recipe_flag(flag_values=FLAGS):
    """For the tools that start recipes: the launcher, bench and study."""
    flags.DEFINE_string(
        "recipe", "mnist", "Recipe name (a file in recipes/) or path to a recipe file.", flag_values=flag_values
    )


def define_mode_option_flags(flag_values=FLAGS):
    """The options of the modes (options/) and every technique's flags (techniques/)."""
    options.define_flags(run_options=False, flag_values=flag_values)
    techniques.define_flags(flag_values)


def define_run_flags(flag_values=FLAGS):
    flags.DEFINE_integer(
        "global_batch_size",
        120,
        "Examples per step over all workers; must divide by the worker count.",
        lower_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_integer("train_steps", 1000, "Global steps to train.", lower_bound=1, flag_values=flag_values)
    define_float("learning_rate", 0.1, "Learning rate of the optimizer.", flag_values=flag_values)
    flags.register_validator(  # at parse: the launcher refuses it before any task starts
        "learning_rate", lambda rate: rate > 0, "must be greater than 0", flag_values=flag_values
    )
    flags.DEFINE_enum(
        "optimizer", "sgd", sorted(OPTIMIZERS), "Optimizer applied on the parameter servers.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "seed", 0, "Seed for data split, shuffling and initial parameters.", lower_bound=0, flag_values=flag_values
    )
    flags.DEFINE_integer(
        "log_every", 50, "Log loss and throughput every this many steps.", lower_bound=1, flag_values=flag_values
    )
    flags.DEFINE_integer(
        "snapshot_every",
        0,
        "The chief also saves the parameters every this many steps (params_at/<step>.npz), to follow how "
        "far runs drift apart as they train. 0: only params.npz, at the end.",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "checkpoint_every",
        100,
        "The chief checkpoints every this many steps (and at the end); rerunning the command resumes "
        "from the latest. 0: only at the end.",
        lower_bound=0,
        flag_values=flag_values,
    )
    define_float(
        "startup_timeout",
        60.0,
        "Seconds a worker waits for the parameter servers to come up and for the chief to initialise the "
        "model, and a parameter server for a worker that is not (or no longer) running.",
        lower_bound=0.0,
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "trace_steps",
        "",
        "FIRST:END: the chief records TensorFlow's step stats for steps FIRST..END-1, writes each as a Chrome "
        "trace (logdir/trace_step_<n>.json) and logs where its time went (profiling.py).",
        flag_values=flag_values,
    )
    validate_by_parsing("trace_steps", profiling.parse_steps, flag_values)
    define_float(
        "operation_timeout",
        300.0,
        "Seconds a worker's step may wait for its peers (a barrier, a parameter server) before it fails; 0: forever.",
        lower_bound=0.0,
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "nan_guard",
        True,
        "Stop the run (exit 1, naming the step) once a loss is NaN or infinite, keeping the last checkpoint "
        "whose parameters are finite; --nonan_guard trains on and logs it.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "intra_op_threads",
        compat.PINNED_THREADS,
        "Threads each task's CPU kernels split an op over. Fixed, whatever the machine's cores, because Eigen "
        "splits a matrix product's sums by it: the same count trains the same bits on every machine.",
        lower_bound=1,
        flag_values=flag_values,
    )
    options.define_flags(run_options=True, flag_values=flag_values)


def define_data_flags(dataset_names, flag_values=FLAGS):
    flags.DEFINE_enum("dataset", dataset_names[0], list(dataset_names), "Dataset to train on.", flag_values=flag_values)
    flags.DEFINE_string(
        "data_dir",
        None,
        "Directory with the dataset's own files (for datasets read from files).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "download", False, "Fetch the dataset's published files into --data_dir first.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "download_url", None, "Base URL to fetch from instead of the dataset's official one.", flag_values=flag_values
    )


def check_flag_scopes(mode, names=tuple(FLAG_SCOPES), flag_values=FLAGS):
    """Raises ConfigError for a flag of `names` given for a run of `mode` it does not apply to."""
    for name in names:
        scope = FLAG_SCOPES[name]
        if name in flag_values and flag_values[name].present and mode not in scope:
            if mode == NO_CLUSTER:
                raise ConfigError(
                    f"--{name} applies only to cluster tasks, and no cluster was given "
                    "(--cluster_spec, --ps_hosts/--worker_hosts or TF_CONFIG)"
                )
            raise not_for_mode(name, mode, scope)


def check_values_in_scope(mode, values, given):
    """Raises ConfigError for a declared flag given, or whose value is not its default, in a run of `mode` it
    does not apply to: Settings made without parsing (the tests, the bench's peers) cannot slip one past the
    scopes."""
    for name, scope in DECLARED_SCOPES.items():
        if mode in scope or name not in values:
            continue
        if name in given or _comparable(values[name]) != _defaults()[name]:
            raise not_for_mode(name, mode, scope)


def _comparable(value):
    """A list flag's value (a list of strings) as Settings holds it: a tuple of ints."""
    return tuple(int(item) for item in value) if isinstance(value, (list, tuple)) else value


@functools.cache
def _defaults():
    """{name: default} of every run and mode-option flag."""
    scratch = flags.FlagValues()
    define_mode_option_flags(scratch)
    define_run_flags(scratch)
    return {name: _comparable(scratch[name].default) for name in scratch}


def check_shape_flags(mode, flag_values=FLAGS):
    """Raises ConfigError for a cluster shape flag given for a mode without that kind of task: groups
    outside hierarchical mode, parameter servers in all-reduce."""
    for name in ("num_groups", "groups"):
        if flag_values[name].present and mode != cluster_lib.GROUPED_MODE:
            raise ConfigError(f"--{name} applies only to --mode=hierarchical, not {mode}")
    if flag_values["num_ps"].present and mode == cluster_lib.WORKERS_ONLY_MODE:
        raise ConfigError(
            f"--num_ps does not apply to --mode={mode}: its workers all-reduce their gradients among themselves, "
            "with no parameter server"
        )


def check_groups_by_host(hosts_known, source, flag_values=FLAGS):
    """--groups=by_host's one rule, wherever a cluster is laid out (Slurm, the launcher, a TFJob): one
    group per host, so `source` must say which tasks share a host (`hosts_known`), and the host count
    is the group count, so --num_groups is refused."""
    if flag_values.groups != "by_host":
        return
    if not hosts_known:
        raise ConfigError(f"--groups=by_host: {source} does not say which tasks share a host; use --num_groups")
    if flag_values["num_groups"].present:
        raise ConfigError("--groups=by_host makes one group per host; it does not take --num_groups")


def not_for_mode(name, mode, scope):
    """The refusal of flag `name` in a run of `mode`, with the reason its declaration gives, if any."""
    declared = DECLARED_BY.get(name)
    why = f": {declared.why_not_other_modes}" if declared and declared.why_not_other_modes else ""
    modes = "|".join(m for m in scope if m != NO_CLUSTER)
    return ConfigError(f"--{name} does not apply to --mode={mode}; it is for --mode={modes}{why}")


DECLARED_BY = {name: declaration for declaration in DECLARATIONS for name in declaration.flags}


def given_task_flags(mode, flag_values=FLAGS):
    """The run and mode-option flags the user gave, as arguments for a task of `mode` ('single' for the
    one-process reference), leaving out the declared flags that do not apply to it."""
    names = [*CORE_RUN_FLAGS, *(name for name, scope in DECLARED_SCOPES.items() if mode in scope)]
    return [flag_values[name].serialize() for name in names if name in flag_values and flag_values[name].present]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a task needs to know, checked; decided once, never changed after parsing."""

    mode: str  # "single" when there is no cluster
    job_name: str  # "worker" in a single-process run
    task_index: int
    cluster: object  # cluster.ClusterConfig or None
    global_batch_size: int
    train_steps: int
    learning_rate: float
    optimizer: str
    seed: int
    logdir: str
    dataset: str
    data_dir: str = None
    download: bool = False
    download_url: str = None
    log_every: int = 50
    eval_every: int = 0
    snapshot_every: int = 0
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    lr_decay_steps: int = 0
    lr_decay_rate: float = 0.1
    lr_decay_milestones: tuple = ()  # of ints
    linear_scaling_batch: int = 0
    nan_guard: bool = True
    intra_op_threads: int = compat.PINNED_THREADS
    startup_timeout: float = 60.0
    checkpoint_every: int = 100
    fresh: bool = False
    operation_timeout: float = 300.0
    aggregation: str = "ordered"
    strict_determinism: bool = False
    microbatches: int = 8
    push_every: int = 1
    fetch_every: int = 1
    prefetch: bool = True
    central_every: int = 1
    steps_per_run: int = 1
    options: dict = dataclasses.field(default_factory=techniques.default_options)  # techniques' flags, by name
    techniques: tuple = ()  # the techniques on, as check_run decided (names, in wrapping order)
    options_on: tuple = ()  # the options on (options/), as check_run decided
    num_gpus: int = 0
    trace_steps: tuple = None  # (first, end) of --trace_steps, or None
    # All-reduce: TensorFlow remembers a collective's keys for the life of a process, so one process
    # that runs several clusters in turn (the tests) gives each its own group; a task runs one.
    collective_group: int = 1

    @property
    def is_chief(self):
        return self.job_name == "worker" and self.task_index == 0

    @property
    def num_workers(self):
        return self.cluster.num_workers if self.cluster else 1

    @property
    def base_learning_rate(self):
        """--learning_rate, times k = --global_batch_size / --linear_scaling_batch under the linear scaling rule:
        the rate wherever one is used (after warm-up, before decay)."""
        if not self.linear_scaling_batch:
            return self.learning_rate
        return self.learning_rate * self.global_batch_size / self.linear_scaling_batch

    @property
    def updates_in_run(self):
        """The updates the whole run applies, in the clock a schedule counts (the global step): one a step in
        sync, all-reduce and one process; in async one a push, N·⌈T/n_push⌉, or with n-softsync one per
        ⌊N/n⌋ pushes (its last may take fewer)."""
        if self.mode != "async":
            return self.train_steps
        pushes = self.num_workers * math.ceil(self.train_steps / self.push_every)
        n = self.options["softsync"]
        return math.ceil(pushes / (self.num_workers // n)) if n else pushes

    @property
    def schedule(self):
        """The learning rate as a function of the update it is applied at (graph/learning_rates.py)."""
        # only cosine's length defaults to the training left: a resume that trains longer then changes it
        decay_steps = self.lr_decay_steps
        if self.lr_schedule == "cosine" and not decay_steps:
            decay_steps = max(self.updates_in_run - self.warmup_steps, 1)
        return Schedule(
            self.base_learning_rate,
            self.lr_schedule,
            self.warmup_steps,
            decay_steps,
            self.lr_decay_rate,
            self.lr_decay_milestones,
            warmup_from=self.learning_rate if self.linear_scaling_batch else None,
        )

    @property
    def spare_workers(self):
        """How many workers may die without stopping training (backup workers), else 0."""
        return techniques.spare_workers(self.techniques, self.options, self.cluster)

    @property
    def clock(self):
        """What the global step counts, the clock a schedule runs in."""
        if self.mode != "async":
            return "steps"
        return "softsync updates" if self.options["softsync"] else "pushes"

    def value(self, name):
        """The run's value of flag `name` (a technique's flags are in `options`)."""
        return self.options[name] if name in self.options else getattr(self, name)

    def mode_options(self):
        """The values of every option of this run's mode: what, besides the common flags, decides its
        arithmetic. Recorded in run.json (a resume must match) and summary.json."""
        return {name: self.value(name) for name, scope in MODE_OPTION_SCOPES.items() if self.mode in scope}

    def declared(self):
        """{name: what it did} for every technique and option this run has on (summary.json): its flags'
        values, unless its declaration says more (the schedule in its clock, compression's algorithm)."""
        on = (*self.techniques, *self.options_on)
        return {
            d.name: d.record(self) if d.record else {flag: self.value(flag) for flag in d.flags}
            for d in DECLARATIONS
            if d.name in on
        }


# The Settings fields that are a flag of the same name, read as given; settings_from_flags decides the others.
FIELDS_AS_GIVEN = tuple(
    field.name
    for field in dataclasses.fields(Settings)
    if field.name
    not in {
        "mode",
        "job_name",
        "task_index",
        "cluster",
        "options",
        "techniques",
        "options_on",
        "num_gpus",
        "trace_steps",
        "collective_group",
    }
)


def settings_from_flags(flag_values=FLAGS):
    """Reads the parsed flags into Settings; raises ConfigError for contradictions."""
    if flag_values.download_url and not flag_values.download:
        raise ConfigError("--download_url only applies with --download")
    if flag_values.failure_exit_code == 2:
        raise ConfigError("--failure_exit_code=2: 2 means a mistake, which no restart cures; choose another code")
    cluster, env_job, env_index = _resolve_cluster(flag_values)
    mode = flag_values.mode if cluster else NO_CLUSTER
    check_flag_scopes(mode, flag_values=flag_values)
    job_name, task_index = "worker", 0
    if cluster:
        job_name = flag_values.job_name or env_job
        task_index = flag_values.task_index if flag_values["task_index"].present or env_index is None else env_index
        if job_name is None:
            raise ConfigError(f"--job_name is required in a cluster: {' or '.join(cluster.jobs)}")
        cluster.check_mode(mode)
        cluster.check_task(job_name, task_index)
    return run_settings(
        given_flags(flag_values),
        mode=mode,
        job_name=job_name,
        task_index=task_index,
        cluster=cluster,
        options={name: flag_values[name].value for name in techniques.flag_scopes()},
        trace_steps=profiling.parse_steps(flag_values.trace_steps),
        **{name: _comparable(flag_values[name].value) for name in FIELDS_AS_GIVEN},
    )


def run_settings(given=frozenset(), **fields):
    """The one way Settings are made (a task, the bench's peers and the tests alike): `fields` checked
    as a whole run (check_run) when there is a cluster, with the techniques its flags switch on and the
    values they settle. `given`: the names of the flags the user set."""
    settings = Settings(**fields)
    values = {**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}, **settings.options}
    composition = check_run(settings.mode, settings.cluster, values, given)
    settled_options = {name: value for name, value in composition.settled.items() if name in settings.options}
    return dataclasses.replace(
        settings,
        techniques=composition.names,
        options_on=composition.options,
        options={**settings.options, **settled_options},
        **{name: value for name, value in composition.settled.items() if name not in settled_options},
    )


def _resolve_cluster(flag_values):
    """(cluster or None, job, index) from the one source given: a resolver, a spec, hosts or TF_CONFIG."""
    if not flag_values.cluster_resolver:
        for name in ("num_ps", "num_groups", "groups", "port_base"):
            if flag_values[name].present:
                raise ConfigError(
                    f"--{name} applies only with --cluster_resolver; a spec, hosts or TF_CONFIG name every task"
                )
        return cluster_lib.resolve(flag_values.cluster_spec, flag_values.ps_hosts, flag_values.worker_hosts)
    for name in ("cluster_spec", "ps_hosts", "worker_hosts", "job_name", "task_index"):
        if flag_values[name].present:
            raise ConfigError(
                f"--cluster_resolver={flag_values.cluster_resolver} decides the cluster and each task's job; "
                f"drop --{name}"
            )
    check_shape_flags(flag_values.mode, flag_values)
    check_groups_by_host(flag_values.cluster_resolver == "slurm", "TF_CONFIG", flag_values)
    if flag_values.cluster_resolver == "tfjob":
        if flag_values["port_base"].present:
            raise ConfigError("--port_base applies only to --cluster_resolver=slurm; TF_CONFIG names every port")
        if not os.environ.get("TF_CONFIG"):
            raise ConfigError("--cluster_resolver=tfjob: TF_CONFIG is not set; the TFJob operator sets it in each pod")
        return cluster_lib.from_tfjob_config(
            os.environ["TF_CONFIG"], flag_values.mode, flag_values.num_ps, flag_values.num_groups
        )
    task = slurm.placement(
        os.environ,
        flag_values.mode,
        flag_values.num_ps,
        flag_values.num_groups,
        flag_values.port_base,
        flag_values.groups,
    )
    return task.cluster, task.job_name, task.task_index


def check_run_fits(cluster, mode, flag_values=FLAGS):
    """check_run for the tools that start a run's tasks (the launcher, study, bench, manifest writer),
    from their parsed `flag_values` of the run and mode-option groups: what the tasks will check, first."""
    values = {name: flag_values[name].value for name in flag_values}
    return check_run(mode, cluster, values, given_flags(flag_values))


def check_run(mode, cluster, values, given):
    """The one check of a whole run, made alike by every task and every tool that starts one: the global
    batch shards over the workers and each group, and the declared techniques and options compose
    (rules.resolve). `values`: {flag name: value} of the run flags and mode options; `given`: the names of
    those the user set; `cluster`: None for the one plain process. A Composition, or ConfigError with one
    line."""
    check_values_in_scope(mode, values, given)
    if cluster:
        cluster_lib.check_shardable(values["global_batch_size"], cluster.num_workers)
        _check_groups(cluster, values["global_batch_size"])
    in_scope = {name: value for name, value in values.items() if mode in FLAG_SCOPES.get(name, (mode,))}
    return rules.resolve(DECLARATIONS, mode, cluster, in_scope, given)


def parse_run_args(args):
    """Run and mode-option flags (`--name=value` strings, as the study's variants give them) parsed with
    their definitions into FlagValues of their own; ConfigError names a bad one."""
    parsed = flags.FlagValues()
    define_mode_option_flags(parsed)
    define_run_flags(parsed)
    try:
        parsed(["run", *args])
    except flags.Error as e:
        raise ConfigError(str(e)) from None
    return parsed


def spare_workers(cluster):
    """For the launcher: how many non-chief workers of `cluster` the run's flags let it lose and go on."""
    options = {name: FLAGS[name].value for name in techniques.flag_scopes()}
    return techniques.spare_workers(check_run_fits(cluster, FLAGS.mode).names, options, cluster)


def given_flags(flag_values=FLAGS):
    """The names of the flags the user set."""
    return {name for name in flag_values if flag_values[name].present}


def _check_groups(cluster, global_batch_size):
    for g, group in enumerate(cluster.groups):
        if global_batch_size % len(group):
            raise ConfigError(
                f"groups[{g}] has {len(group)} workers, which does not divide --global_batch_size={global_batch_size}"
            )
