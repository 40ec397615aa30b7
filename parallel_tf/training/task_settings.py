"""A task's Settings from its parsed flags: its cluster and place in it (from a spec, hosts, TF_CONFIG or a
cluster manager), the flags read as given, and the recipe's own; settings.run_settings checks them as a run.
"""

import dataclasses
import os

from absl import flags

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.cluster import slurm
from parallel_tf.errors import ConfigError
from parallel_tf.training import modes, profiling, run_check
from parallel_tf.training.run_flags import given_flags
from parallel_tf.training.settings import SETTLED, Settings, run_settings

FLAGS = flags.FLAGS


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
        "one_step_a_run",
        "recipe_flags",
        *SETTLED,
    }
)


def settings_from_flags(flag_values=FLAGS):
    """Reads the parsed flags into Settings; raises ConfigError for contradictions."""
    if flag_values.download_url and not flag_values.download:
        raise ConfigError("--download_url only applies with --download")
    if flag_values.failure_exit_code == 2:
        raise ConfigError("--failure_exit_code=2: 2 means a mistake, which no restart cures; choose another code")
    cluster, env_job, env_index = _cluster_and_task(flag_values)
    mode = flag_values.mode if cluster else run_check.NO_CLUSTER
    run_check.check_flag_scopes(mode, flag_values=flag_values)
    job_name, task_index = "worker", 0
    if cluster:
        job_name = flag_values.job_name or env_job
        task_index = flag_values.task_index if flag_values["task_index"].present or env_index is None else env_index
        if job_name is None:
            raise ConfigError(f"--job_name is required in a cluster: {' or '.join(cluster.jobs)}")
        modes.check_cluster(mode, cluster)
        cluster.check_task(job_name, task_index)
    return run_settings(
        given_flags(flag_values),
        mode=mode,
        job_name=job_name,
        task_index=task_index,
        cluster=cluster,
        trace_steps=profiling.parse_steps(flag_values.trace_steps),
        recipe_flags=recipe_flags(flag_values),
        **{name: run_check.as_settings_value(flag_values[name].value) for name in FIELDS_AS_GIVEN},
        **{name: run_check.as_settings_value(flag_values[name].value) for name in run_check.DECLARED_SCOPES},
    )


def recipe_flags(flag_values):
    """((name, value), ...) of the flags the recipe defines itself (--model, --augment): every flag that neither
    this package nor absl nor TensorFlow defines (its import defines a few: --delta_threshold, ...). They decide
    what is computed, so a resume must match them."""
    libraries = ("parallel_tf.", "absl.", "tensorflow.")
    return tuple(
        sorted(
            (flag.name, flag.value)
            for module, defined in flag_values.flags_by_module_dict().items()
            if not module.startswith(libraries)
            for flag in defined
        )
    )


def _cluster_and_task(flag_values):
    """(cluster or None, job, index) from the one source given: a resolver, a spec, hosts or TF_CONFIG."""
    if not flag_values.cluster_resolver:
        for name in (*modes.SHAPE_FLAGS, "port_base"):
            if flag_values[name].present:
                raise ConfigError(
                    f"--{name} applies only with --cluster_resolver; a spec, hosts or TF_CONFIG name every task"
                )
        return cluster_lib.from_given_source(flag_values.cluster_spec, flag_values.ps_hosts, flag_values.worker_hosts)
    for name in ("cluster_spec", "ps_hosts", "worker_hosts", "job_name", "task_index"):
        if flag_values[name].present:
            raise ConfigError(
                f"--cluster_resolver={flag_values.cluster_resolver} decides the cluster and each task's job; "
                f"drop --{name}"
            )
    modes.check_shape_flags(flag_values.mode, flag_values)
    modes.check_layout(flag_values.mode, flag_values.cluster_resolver == "slurm", "TF_CONFIG", flag_values)
    num_ps, num_groups = modes.server_counts(flag_values.mode, flag_values.num_ps, flag_values.num_groups)
    if flag_values.cluster_resolver == "tfjob":
        if flag_values["port_base"].present:
            raise ConfigError("--port_base applies only to --cluster_resolver=slurm; TF_CONFIG names every port")
        if not os.environ.get("TF_CONFIG"):
            raise ConfigError("--cluster_resolver=tfjob: TF_CONFIG is not set; the TFJob operator sets it in each pod")
        return cluster_lib.from_tfjob_config(os.environ["TF_CONFIG"], num_ps, num_groups)
    task = slurm.placement(os.environ, num_ps, num_groups, flag_values.port_base, flag_values.groups)
    return task.cluster, task.job_name, task.task_index
