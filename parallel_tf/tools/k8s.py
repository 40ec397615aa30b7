"""Writes a Kubeflow TFJob manifest (kubeflow.org/v1) that runs a recipe's cluster on Kubernetes.

    python -m parallel_tf.k8s --image=IMAGE [--name=mnist-sync] [--recipe=mnist] [--mode=sync]
                              [--num_workers=2] [--num_ps=1] [--num_groups=2] [--logdir=/logs/run]
                              [--logdir_claim=PVC] [--output=tfjob.json] [run and mode flags] [recipe flags]

Every pod runs the recipe with --cluster_resolver=tfjob, which reads the TF_CONFIG the operator
injects. TFJob supervises PS and Worker replicas only (a custom replica type gets pods, but its
failures never fail the job), so a hierarchical cluster's local parameter servers are PS
replicas after the central ones, mapped back to local_ps tasks by --num_ps and --num_groups.

Restarts follow `restartPolicy: ExitCode`, under which Kubeflow retries exit codes 128-255 and
gives up on 1-127: a failure a restart can cure (a lost peer, a timeout) exits RETRYABLE_EXIT_CODE,
a mistake exits 2 and is never retried, a bug's traceback exits 1. `cleanPodPolicy: Running` stops
parameter servers still running when the job ends (the default, None, leaves them running).
The manifest is JSON, which kubectl reads as it reads YAML: `kubectl apply -f tfjob.json`.
"""

import copy
import json
import re

from absl import app, flags

from parallel_tf.cli import exit_config_error, parse_flags_or_exit
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.launch.launcher import recipe_name, resolve_recipe
from parallel_tf.training import cluster_flags, modes, run_check, run_flags

FLAGS = flags.FLAGS
RETRYABLE_EXIT_CODE = 138  # in Kubeflow's retried range, 128-255
TFJOB_PORT = 2222  # the operator's default, from the container port named tfjob-port
CONTAINER_NAME = "tensorflow"  # the container the operator's webhook requires
JOB_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # a DNS-1035 label, as the webhook checks


def define_k8s_flags():
    run_flags.define_recipe_flag()
    run_flags.define_mode_flag()
    run_flags.define_mode_option_flags()
    run_flags.define_run_flags()
    cluster_flags.define_cluster_shape_flags()
    flags.DEFINE_integer("num_workers", 2, "Worker replicas.", lower_bound=1)
    flags.DEFINE_string("image", None, "Container image with this repository and its dependencies installed.")
    flags.DEFINE_string("name", None, "The TFJob's name (a DNS label); default <recipe>-<mode>.")
    flags.DEFINE_string("namespace", None, "The TFJob's namespace; default: kubectl's current one.")
    flags.DEFINE_string("workdir", "/app", "Where the repository is inside the image.")
    flags.DEFINE_string("logdir", "/logs/run", "The run's --logdir inside every pod.")
    flags.DEFINE_string(
        "logdir_claim",
        None,
        "A PersistentVolumeClaim mounted at --logdir in every pod: the chief writes the outputs and each "
        "ps its checkpoint shards there, so a restarted pod resumes from them.",
    )
    flags.DEFINE_string("output", "-", "Where to write the manifest; - for stdout.")


def replica_counts(mode, num_ps, num_groups, num_workers):
    """{"PS": central and local parameter servers, "Worker": workers}: the replicas of the TFJob, Worker
    only in all-reduce mode."""
    servers = sum(modes.server_counts(mode, num_ps, num_groups))
    return {**({"PS": servers} if servers else {}), "Worker": num_workers}


def operator_cluster(name, namespace, replicas, mode, num_ps, num_groups):
    """The cluster the tasks will resolve from the operator's TF_CONFIG: pods addressed as
    <name>-<type>-<index>.<namespace>.svc:2222, PS then Worker."""
    addresses = [
        f"{name}-{kind.lower()}-{i}.{namespace or 'default'}.svc:{TFJOB_PORT}"
        for kind, count in replicas.items()
        for i in range(count)
    ]
    central, local = modes.server_counts(mode, num_ps, num_groups)
    return cluster_lib.assign_jobs(addresses, central, local, "the TFJob")


def manifest(
    *, name, namespace, image, workdir, logdir, logdir_claim, recipe, mode, num_ps, num_groups, replicas, task_args
):
    """The TFJob as a dict; `task_args` are the run, mode and recipe flags every task gets."""
    central, local = modes.server_counts(mode, num_ps, num_groups)
    shape = [*([f"--num_ps={central}"] if central else []), *([f"--num_groups={local}"] if local else [])]
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "workingDir": workdir,
        "command": ["python", "-u", f"recipes/{recipe}.py"],
        "args": [
            "--cluster_resolver=tfjob",
            f"--mode={mode}",
            *shape,
            f"--logdir={logdir}",
            f"--failure_exit_code={RETRYABLE_EXIT_CODE}",
            *task_args,
        ],
        "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}],
    }
    pod = {"containers": [container]}
    if logdir_claim:
        container["volumeMounts"] = [{"name": "logdir", "mountPath": logdir}]
        pod["volumes"] = [{"name": "logdir", "persistentVolumeClaim": {"claimName": logdir_claim}}]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running"},
            "tfReplicaSpecs": {
                kind: {"replicas": count, "restartPolicy": "ExitCode", "template": {"spec": copy.deepcopy(pod)}}
                for kind, count in replicas.items()
            },
        },
    }


def main(argv):
    recipe_flags = [arg for arg in argv[1:] if arg != "--"]
    try:
        recipe = recipe_name(resolve_recipe(FLAGS.recipe))
        run_check.check_flag_scopes(FLAGS.mode, run_check.DECLARED_SCOPES)
        modes.check_shape_flags(FLAGS.mode)
        modes.check_layout(FLAGS.mode, False, "a TFJob")
        if FLAGS.link_rate:
            raise ConfigError("--link_rate: a TFJob's network is the cluster's own; only the local launcher shapes one")
        if not FLAGS.image:
            raise ConfigError("--image is required: the container image the pods run")
        name = FLAGS.name or f"{recipe}-{FLAGS.mode}".replace("_", "-").lower()
        if not JOB_NAME.fullmatch(name) or len(name) > 63:
            raise ConfigError(f"--name={name}: a TFJob name must be a DNS label: a-z, 0-9 and '-', at most 63")
        replicas = replica_counts(FLAGS.mode, FLAGS.num_ps, FLAGS.num_groups, FLAGS.num_workers)
        cluster = operator_cluster(name, FLAGS.namespace, replicas, FLAGS.mode, FLAGS.num_ps, FLAGS.num_groups)
        run_check.check_run_fits(cluster, FLAGS.mode)
        job = manifest(
            name=name,
            namespace=FLAGS.namespace,
            image=FLAGS.image,
            workdir=FLAGS.workdir,
            logdir=FLAGS.logdir,
            logdir_claim=FLAGS.logdir_claim,
            recipe=recipe,
            mode=FLAGS.mode,
            num_ps=FLAGS.num_ps,
            num_groups=FLAGS.num_groups,
            replicas=replicas,
            task_args=[*run_check.given_task_flags(FLAGS.mode), *recipe_flags],
        )
    except ConfigError as e:
        exit_config_error(str(e))
    text = json.dumps(job, indent=2) + "\n"
    if FLAGS.output == "-":
        print(text, end="")
        return
    with open(FLAGS.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {FLAGS.output}: kubectl apply -f {FLAGS.output}")


def run_command_line():
    """`python -m parallel_tf.k8s`."""
    define_k8s_flags()
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, known_only=True, command=__name__))
