"""The cluster's flags (run_flags.py's groups "cluster", "cluster spec" and "cluster shape"): a task's job and
index, its peers by address or by a cluster manager's environment, and how many tasks each server job has."""

from absl import flags

from parallel_tf.training import modes

FLAGS = flags.FLAGS
RESOLVERS = ("slurm", "tfjob")


def define_task_place_flags(flag_values=FLAGS):
    """Where a task started by hand stands: its job and index, its peers, or the cluster manager that says so."""
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
    modes.define_own_flags(flag_values)
