"""Every flag, defined once, in groups the entry points adopt (as tensorflow/models' official/utils/flags).

    group             defined by                      flags
    cluster           tasks                           --job_name --task_index --ps_hosts --worker_hosts
     (cluster_flags.py)                               --cluster_resolver --port_base
    cluster spec      tasks, launcher                 --cluster_spec
    cluster shape     tasks, launcher, k8s            --num_ps, and each mode's own (modes/: --num_groups ...)
    mode              tasks, launcher, k8s            --mode
    mode options      tasks, launcher, k8s, study     --push_every ... and every technique's flags
    run               tasks, launcher, k8s, study,    --global_batch_size --train_steps --seed ...
                      bench, peers
    logdir            tasks, launcher                 --logdir --fresh
    recipe            launcher, k8s, study, peers     --recipe
    data              tasks, peers (per recipe)       --dataset --data_dir --download --download_url

The launcher, bench and study pass the run flags a user gave (and the launcher and study the mode
options) on to the tasks they start (run_check.given_task_flags), so a flag has one definition and one
default everywhere. What a task makes of them is settings.py's; the one check of a whole run, run_check.py's.
"""

from absl import flags

from parallel_tf import cli, compat
from parallel_tf.cli import define_float, validate_by_parsing
from parallel_tf.errors import ConfigError
from parallel_tf.graph.optimizers import OPTIMIZERS
from parallel_tf.training import cluster_flags, modes, options, profiling, rules, techniques

FLAGS = flags.FLAGS
OPTIONS = (*options.OPTIONS, *modes.OPTIONS)  # every option's module: those modes share, then each mode's own
MAX_INTRA_OP_THREADS = 1024  # more is a typo: TensorFlow would start that many threads in every task

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
    "kernels",
)


# The launcher's own flags, which a task started by hand does not take (tests/test_bad_input.py checks the list):
# its refusal says whose they are, not which of its own flags is closest.
LAUNCHER_FLAGS = (
    "num_workers",
    "simulate_hosts",
    "max_restarts",
    "min_workers",
    "isolate_network",
    "fork_tasks",
    "recipe",
    "dry_run",
)
LAUNCHER_HINTS = {
    name: "it is the launcher's (./run_local_cluster.sh, python -m parallel_tf.launch), which starts every task; "
    "a task started by hand takes its cluster from --cluster_spec, --ps_hosts/--worker_hosts, TF_CONFIG or "
    "--cluster_resolver" + ("" if name != "dry_run" else ", and checks its flags with --check_flags")
    for name in LAUNCHER_FLAGS
}


def help_sections():
    """--help's sections (cli.HELP_SECTIONS) of the flags defined here and by the modes, options and techniques."""
    declared = {
        "options": [(o.OPTION, o.__name__) for o in OPTIONS],
        "techniques": [(t.TECHNIQUE, t.__name__) for t in techniques.TECHNIQUES],
    }
    return [
        (None, [("run flags, passed on to every task", __name__)]),
        (None, [("the cluster's shape, and a task's place in it", cluster_flags.__name__)]),
        (None, [(f"flags of --mode={m.MODE.name} only", m.__name__) for m in modes.CLUSTER_MODES]),
        *(
            (
                f"{kind}, each with the modes it applies to (docs/modes-and-techniques.md):",
                [(f"{d.name} ({rules.scope_named(d.modes, prefix='')})", module) for d, module in of_kind],
            )
            for kind, of_kind in declared.items()
        ),
    ]


cli.HELP_SECTIONS.append(help_sections)


def define_task_flags(dataset_names, flag_values=FLAGS):
    """Every flag of a task; `dataset_names` are the recipe's datasets, the first the default."""
    cluster_flags.define_task_place_flags(flag_values)
    cluster_flags.define_cluster_spec_flag(flag_values)
    cluster_flags.define_cluster_shape_flags(flag_values)
    define_mode_flag(flag_values)
    define_mode_option_flags(flag_values)
    define_run_flags(flag_values)
    define_logdir_flags(flag_values)
    define_data_flags(dataset_names, flag_values)


def define_mode_flag(flag_values=FLAGS):
    flags.DEFINE_enum("mode", "sync", modes.NAMES, "Distributed training mode.", flag_values=flag_values)


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


def define_dry_run_flag(what, flag_values=FLAGS):
    """For the tools that start runs (the launcher, study, bench): check everything, say `what` would run, exit."""
    flags.DEFINE_bool(
        "dry_run",
        False,
        f"Make every check a start makes, print {what}, and exit (0, or 2 and the one-line error): nothing is "
        "started, downloaded or written.",
        flag_values=flag_values,
    )


def define_recipe_flag(flag_values=FLAGS):
    """For the tools that start recipes: the launcher, bench and study."""
    flags.DEFINE_string(
        "recipe", "mnist", "Recipe name (a file in recipes/) or path to a recipe file.", flag_values=flag_values
    )


def define_mode_option_flags(flag_values=FLAGS):
    """The options of the modes (options/) and every technique's flags (techniques/)."""
    options.define_flags(OPTIONS, run_options=False, flag_values=flag_values)
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
    _define_task_flags(flag_values)
    options.define_flags(OPTIONS, run_options=True, flag_values=flag_values)


def _define_task_flags(flag_values):
    """How a task runs, whatever it trains: its timeouts, its NaN guard, its traces, its threads and kernels."""
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
        None,
        f"Threads each task's CPU kernels split an op over (default: the environment's {compat.INTRA_OP_THREADS}, "
        "else, in a launch, the machine's cores shared by its workers, at least 1, and in a task by hand or one "
        f"process {compat.PINNED_THREADS}). No portable bit depends on it; with "
        "--kernels=fast TensorFlow's products may split sums by it, so a fast run's resume keeps it.",
        lower_bound=1,
        upper_bound=MAX_INTRA_OP_THREADS,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "kernels",
        None,
        list(compat.KERNELS),
        f"portable (default, unless the environment's {compat.CONTRACTION_KERNEL} says true): the same bits on "
        "every x86-64 CPU with AVX2 and FMA, every product in this package's own op (each sum in order, term 0 "
        "first, by fused multiply-adds) and every other op of the step on an allow-list of exact ones, checked as "
        "the run starts (graph/exact_ops.py); fast: TensorFlow's own products and oneDNN's, whose bits follow the "
        "CPU.",
        flag_values=flag_values,
    )


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


def given_flags(flag_values=FLAGS):
    """The names of the flags the user set."""
    return {name for name in flag_values if flag_values[name].present}
