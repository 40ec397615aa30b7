"""The TFJob manifest: valid for the CRD's schema (vendored) and the operator's webhook rules, and its
pods train when started here with the TF_CONFIG the operator would inject."""

import json
import os
import re
import signal
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import REPO, RUN_TIMEOUT, SYNC_STEPS, ProcessTracker, read_summary

from parallel_tf.cluster.config import from_tfjob_config
from parallel_tf.launch.local import free_loopback_addresses
from parallel_tf.tools import k8s
from parallel_tf.training import modes

CRD = json.loads((Path(__file__).parent / "data" / "tfjob_crd_v1_schema.json").read_text())["schema"]


def job(mode="sync", num_ps=1, num_groups=2, num_workers=2, task_args=(), **overrides):
    replicas = k8s.replica_counts(mode, num_ps, num_groups, num_workers)
    fields = dict(name="mnist-" + mode, namespace="research", image="registry.example/parallel_tf:1", workdir="/app")
    fields.update(logdir="/logs/run", logdir_claim="runs", recipe="mnist", mode=mode, num_ps=num_ps)
    fields.update(num_groups=num_groups, replicas=replicas, task_args=list(task_args), **overrides)
    return k8s.manifest(**fields)


def unknown_fields(value, schema, path="$"):
    """Fields the schema does not declare: the API server would prune them (kubectl --validate=strict
    refuses them), so a manifest must have none."""
    if isinstance(value, dict) and schema.get("type") == "object":
        declared = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            if key in declared:
                found += unknown_fields(item, declared[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(item, extra, f"{path}.{key}")
            elif schema.get("x-kubernetes-preserve-unknown-fields") or path == "$.metadata":
                continue
            else:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [
            field for i, item in enumerate(value) for field in unknown_fields(item, schema["items"], f"{path}[{i}]")
        ]
    return []


def webhook_errors(manifest):
    """The training-operator's TFJob admission webhook (release-1.9, pkg/webhooks/tensorflow): a DNS-1035
    name; replica specs; in each, containers with an image and one named "tensorflow"; at most one
    Chief or Master."""
    errors = []
    name = manifest["metadata"]["name"]
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        errors.append(f"metadata.name {name!r} is not a DNS-1035 label")
    specs = manifest["spec"].get("tfReplicaSpecs")
    if not specs:
        errors.append("spec.tfReplicaSpecs: must be required")
    for kind, spec in (specs or {}).items():
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        if not containers:
            errors.append(f"{kind}: containers must be specified")
        errors += [f"{kind}: container {i} has no image" for i, c in enumerate(containers) if not c.get("image")]
        if not any(c.get("name") == "tensorflow" for c in containers):
            errors.append(f"{kind}: must have at least one container with name tensorflow")
    if sum(kind in ("Chief", "Master") for kind in specs or {}) > 1:
        errors.append("must not have more than 1 Chief or Master role")
    return errors


@pytest.mark.parametrize("mode", ["sync", "async", "hierarchical", "allreduce"])
def test_manifest_is_valid_for_the_crd_and_the_webhook(mode):
    manifest = job(mode, task_args=["--train_steps=100"])
    jsonschema.validate(manifest, CRD)
    assert unknown_fields(manifest, CRD) == []
    assert webhook_errors(manifest) == []
    specs = manifest["spec"]["tfReplicaSpecs"]
    # the local parameter servers are PS replicas after the central one; all-reduce has workers only
    ps_replicas = {"hierarchical": {"PS": 3}, "allreduce": {}}.get(mode, {"PS": 1})
    assert {kind: spec["replicas"] for kind, spec in specs.items()} == {**ps_replicas, "Worker": 2}
    assert {spec["restartPolicy"] for spec in specs.values()} == {"ExitCode"}
    assert manifest["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    args = specs["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert "--cluster_resolver=tfjob" in args and "--train_steps=100" in args
    code = int(next(arg for arg in args if arg.startswith("--failure_exit_code=")).split("=")[1])
    assert 128 <= code <= 255  # retried under ExitCode; a mistake's 2 is not


def test_the_checks_catch_what_the_operator_would_refuse():
    """The schema, field and webhook checks above are not vacuous."""
    bad = job(name="Mnist_Sync")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    bad["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["imagePullSecret"] = "x"
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'integer'"):
        jsonschema.validate(bad, CRD)
    assert unknown_fields(bad, CRD) == ["$.spec.tfReplicaSpecs.PS.template.spec.containers[0].imagePullSecret"]
    assert webhook_errors(bad) == [
        "metadata.name 'Mnist_Sync' is not a DNS-1035 label",
        "Worker: must have at least one container with name tensorflow",
    ]


def test_the_tfjob_resolver_maps_ps_replicas_after_the_central_ones_to_the_groups_local_ps():
    """Two groups: of the operator's PS 0-2, PS 0 is the central ps and PS 1, 2 the local ones; worker i
    is in group i mod 2. TF_CONFIG as the operator writes it: its "environment" key, and the port of
    the container's tfjob-port, here an edited manifest's 2345 rather than the default 2222."""
    cluster = {
        "ps": [f"j-ps-{i}.ns.svc:2345" for i in range(3)],
        "worker": [f"j-worker-{i}.ns.svc:2345" for i in range(4)],
    }
    tasks = [("ps", 0, ("ps", 0)), ("ps", 2, ("local_ps", 1)), ("worker", 3, ("worker", 3))]
    for kind, index, expected in tasks:
        tf_config = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}, "environment": "cloud"})
        config, job_name, task_index = from_tfjob_config(tf_config, *modes.server_counts("hierarchical", 1, 2))
        assert (job_name, task_index) == expected
    assert config.jobs["local_ps"] == ("j-ps-1.ns.svc:2345", "j-ps-2.ns.svc:2345")
    assert config.groups == ((0, 2), (1, 3))


def test_an_allreduce_tfjob_is_workers_only_and_its_pods_resolve_to_them():
    """No PS replica and no --num_ps in the pods' args; TF_CONFIG with workers only is the cluster."""
    manifest = job("allreduce", num_workers=3)
    args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert "--mode=allreduce" in args and not [arg for arg in args if arg.startswith("--num_ps")]
    cluster = {"worker": [f"j-worker-{i}.ns.svc:2222" for i in range(3)]}
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 2}, "environment": "cloud"})
    config, job_name, task_index = from_tfjob_config(tf_config, *modes.server_counts("allreduce", 1, 2))
    assert (job_name, task_index, config.num_ps, config.jobs["worker"]) == ("worker", 2, 0, tuple(cluster["worker"]))


def operator_tf_config(manifest, addresses, kind, index):
    """The TF_CONFIG the operator injects into pod <kind>-<index> (genTFConfigJSONStr): lower-cased
    replica types, every replica's address, environment "cloud". `addresses` stand in for its
    <job>-<type>-<i>.<namespace>.svc:2222 names, which do not resolve here."""
    cluster = {kind.lower(): addresses[kind] for kind in manifest["spec"]["tfReplicaSpecs"]}
    return json.dumps({"cluster": cluster, "task": {"type": kind.lower(), "index": index}, "environment": "cloud"})


@pytest.mark.cluster
def test_hierarchical_tfjob_pods_train_with_the_operators_tf_config(tmp_path):
    """One group of one worker (three pods, for the suite's time): PS 0 is the central ps, PS 1 the
    group's local parameter server. Every pod runs the container's command and args (the logdir aside)
    on this machine, each server exits by itself when its workers are done, and the group exchanged
    with the central ps."""
    task_args = ["--central_every=5", "--train_steps=100", "--log_every=20"]
    manifest = job("hierarchical", num_groups=1, num_workers=1, task_args=task_args)
    tracker = ProcessTracker()
    try:
        pods = start_pods(manifest, tracker, tmp_path)
        for name, pod in pods.items():
            assert pod.wait(RUN_TIMEOUT) == 0, f"{name}:\n{pod.output}"
    finally:
        tracker.kill_all()
    for pod, task in (("PS-0", "ps:0"), ("PS-1", "local_ps:0")):
        assert f"all workers finished; {task} exiting" in pods[pod].output
    summary = read_summary(tmp_path)
    assert summary["central_exchanges_by_group"] == [20]  # train_steps / central_every
    assert summary["eval_accuracy"] > 0.8


@pytest.mark.cluster
def test_a_chief_pod_restarted_while_the_others_run_rejoins_and_ends_on_the_uninterrupted_run(
    sync_two_workers, tmp_path
):
    """Under restartPolicy ExitCode the operator restarts a killed pod (137) and leaves the others
    running. The restarted chief finds the model live on the parameter server, so it rejoins it
    rather than restoring its older checkpoint over the step the other worker is in; the run ends on
    the launcher's uninterrupted params_sha256."""
    _, launcher_logdir = sync_two_workers
    manifest = job("sync", task_args=[*SYNC_STEPS, "--checkpoint_every=20"])
    tracker = ProcessTracker()
    try:
        pods = start_pods(manifest, tracker, tmp_path)
        pods["Worker-0"].wait_for_line(r"step 40/100", timeout=RUN_TIMEOUT)
        os.kill(pods["Worker-0"].proc.pid, signal.SIGKILL)
        assert pods["Worker-0"].wait(30) == -signal.SIGKILL
        restarted = tracker.start(pods["Worker-0"].proc.args, env=pods["Worker-0"].env)
        # the workers first: a server waits for them, so a worker that never ends is the one whose output says why
        for name, pod in sorted({**pods, "Worker-0": restarted}.items(), key=lambda item: not item[0].startswith("W")):
            assert pod.wait(RUN_TIMEOUT) == 0, f"{name}:\n{pod.output}"
    finally:
        tracker.kill_all()
    rejoined = re.search(r"rejoined the running cluster at step (\d+)/100", restarted.output)
    assert rejoined, restarted.output
    assert "resuming from" not in restarted.output
    # The killed chief logged 20 and 40, and perhaps a step it reached before the kill landed; the restarted
    # one logs every step of 20 after the one it rejoined at. No step twice, none out of order.
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    after = int(rejoined[1])
    assert steps[:2] == [20, 40] and steps == sorted(set(steps)), steps
    assert [step for step in steps if step > after] == [step for step in (60, 80, 100) if step > after], (after, steps)
    assert read_summary(tmp_path)["params_sha256"] == read_summary(launcher_logdir)["params_sha256"]


def start_pods(manifest, tracker, logdir):
    """Every pod of `manifest`, started here with the TF_CONFIG the operator would inject: the
    container's command and args, with `logdir` for the claim's path."""
    specs = manifest["spec"]["tfReplicaSpecs"]
    ports = iter(free_loopback_addresses(sum(spec["replicas"] for spec in specs.values())))
    addresses = {kind: [next(ports) for _ in range(spec["replicas"])] for kind, spec in specs.items()}
    pods = {}
    for kind, spec in specs.items():
        container = spec["template"]["spec"]["containers"][0]
        args = [f"--logdir={logdir}" if arg.startswith("--logdir=") else arg for arg in container["args"]]
        command = [sys.executable, *container["command"][1:], *args]
        assert Path(REPO, container["command"][-1]).is_file()
        for index in range(spec["replicas"]):
            env = {"TF_CONFIG": operator_tf_config(manifest, addresses, kind, index)}
            pods[f"{kind}-{index}"] = tracker.start(command, env=env)
    return pods
