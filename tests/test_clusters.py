"""Real multi-process clusters on 127.0.0.1: sync training, its reproducibility promises, and
the launcher's handling of failures. One cluster at a time; each run is shared by the tests
that read it, and the launches fork their tasks from the session's warm server (launch/warm_server.py), so the
suite loads TensorFlow as few times as it can."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import models
import pytest
from conftest import (
    REPO,
    RUN_TIMEOUT,
    SYNC_STEPS,
    ProcessTracker,
    alive,
    launcher_command,
    read_summary,
    recipe_command,
    slurm_is_up,
)
from tensorboard.backend.event_processing import event_accumulator

from parallel_tf.compat import tf
from parallel_tf.launch import warm_client
from parallel_tf.launch.local import free_loopback_addresses

STEPS = SYNC_STEPS
SUMMARY_KEYS = {
    "mode",
    "num_workers",
    "num_ps",
    "global_batch_size",
    "train_steps",
    "final_loss",
    "eval_accuracy",
    "examples_per_sec",
    "wall_seconds",
    "cpu_steal",
    "seed",
    "tf_version",
    "params_sha256",
}

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("from_the_warm_server")]


@pytest.fixture(scope="module")
def tracker():
    tracker = ProcessTracker()
    yield tracker
    tracker.kill_all()


def test_a_tracker_kills_no_later_process_or_thread_given_a_tracked_number():
    """A thread of this process given the number of a tracked task that has exited, as the session-scoped run's
    tasks have by the session's end: kill_all, by PID, would SIGKILL this whole process."""
    tracker = ProcessTracker()
    done, numbered = threading.Event(), []
    thread = threading.Thread(target=lambda: (numbered.append(_thread_id()), done.wait()))
    thread.start()
    while not numbered:
        time.sleep(0.01)
    tracker.started[numbered[0]] = "0"  # the number's process: started at boot, long gone
    tracker.kill_all()
    done.set()
    thread.join()


def _thread_id():
    """The calling thread's number in the kernel (threading.get_native_id, from Python 3.8; gettid before)."""
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes

    return ctypes.CDLL(None).syscall(186)  # gettid on x86-64


def test_launcher_runs_every_task_and_leaves_none_running(sync_two_workers):
    """Forked from one process that loaded TensorFlow for them, which is gone too (tasks started by hand, as
    Slurm starts them, end on these bits: test_slurm_step_on_the_launchers_ports_matches_it_bitwise)."""
    run, _ = sync_two_workers
    assert set(run.task_pids) == {"ps:0", "worker:0", "worker:1"}
    assert len(run.fork_server_pids) == 1
    assert not [pid for pid in [*run.task_pids.values(), *run.fork_server_pids] if alive(pid)]
    assert any(line.startswith("[worker:0]") and "step 100/100" in line for line in run.lines)
    assert any(line.startswith("[ps:0]") and "all workers finished" in line for line in run.lines)
    assert "all 3 tasks exited 0" in run.output


def test_the_readmes_sample_output_is_what_the_default_launch_says(procs, tmp_path):
    """Each line of the README's sample is a line `./run_local_cluster.sh` printed, in the same order, its numbers,
    times, PIDs, paths and hashes aside (here 100 steps, not 1000): a message that changes cannot leave the front
    door's sample behind."""
    readme = (REPO / "README.md").read_text()
    sample = re.search(r"```\n(\[launch\] the cluster runs in a private.*?)```", readme, re.S)[1].splitlines()
    own = ["env", "-u", warm_client.SOCKET_VARIABLE, "-C", str(tmp_path)]  # its own fork server, as a new user's
    run = procs.start([*own, *launcher_command("--train_steps=100", "--log_every=50")])
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    printed = iter(run.lines)
    for line in sample:
        if line != "...":
            assert any(re.fullmatch(_shape(line), said) for said in printed), f"{line!r}, in order:\n{run.output}"


def _shape(line):
    """A pattern for a line of output, its runs/ paths, abbreviated hashes and numbers left open."""
    parts = re.split(r"(runs/\S*|[0-9a-f]{8}\.\.\.|\d+(?:\.\d+)?)", line)
    open_parts = {"runs/": r"runs/\S*", "...": "[0-9a-f]{64}"}
    return "".join(
        re.escape(part) if i % 2 == 0 else next((p for k, p in open_parts.items() if k in part), r"\d+(?:\.\d+)?")
        for i, part in enumerate(parts)
    )


def test_chief_writes_the_documented_outputs(sync_two_workers):
    _, logdir = sync_two_workers
    summary = read_summary(logdir)
    assert set(summary) >= SUMMARY_KEYS
    assert (summary["mode"], summary["num_workers"], summary["num_ps"], summary["train_steps"]) == ("sync", 2, 1, 100)
    assert len(summary["params_sha256"]) == 64
    assert summary["eval_accuracy"] > 0.8
    metrics = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [20, 40, 60, 80, 100]
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    board = event_accumulator.EventAccumulator(str(logdir))  # what `tensorboard --logdir` reads
    board.Reload()
    scalars = board.Scalars("loss")
    assert [e.step for e in scalars] == [m["step"] for m in metrics]
    assert [e.value for e in scalars] == pytest.approx([m["loss"] for m in metrics], rel=1e-7)  # float32 there
    assert list(logdir.glob("model.ckpt-100*"))
    saved = {name for name, _ in tf.train.list_variables(str(logdir / "model.ckpt-100"))}
    assert "model/hidden/weights" in saved
    assert not [name for name in saved if "gradient_slots" in name]  # per-step scratch, not state
    spec = json.loads((logdir / "cluster_spec.json").read_text())
    assert all(address.startswith("127.0.0.1:") for hosts in spec["cluster"].values() for address in hosts)


@pytest.mark.skipif(slurm_is_up(), reason="a real Slurm is up: tests/test_slurm_real.py runs this step with srun")
def test_slurm_step_on_the_launchers_ports_matches_it_bitwise(sync_two_workers, tracker, tmp_path):
    """Three tasks started by hand as srun would start them: the same command, and only Slurm's
    variables (faked for one node) to tell them apart. They reuse the ports the launcher's run has
    just closed, as a cluster manager restarts tasks (those connections are still in TIME_WAIT),
    and they must train the launcher's params_sha256."""
    _, launcher_logdir = sync_two_workers
    logdir = tmp_path / "slurm"
    spec = json.loads((launcher_logdir / "cluster_spec.json").read_text())
    port_base = int(spec["cluster"]["ps"][0].split(":")[1])
    command = recipe_command("--cluster_resolver=slurm", f"--port_base={port_base}", f"--logdir={logdir}", *STEPS)
    step = {"SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_STEP_NUM_TASKS": "3"}
    tasks = [tracker.start(command, env=dict(step, SLURM_PROCID=str(r), SLURM_LOCALID=str(r))) for r in range(3)]
    for task in tasks:
        assert task.wait(RUN_TIMEOUT) == 0, task.output
    assert "all workers finished" in tasks[0].output  # rank 0, the ps, exited by itself
    assert read_summary(logdir)["params_sha256"] == read_summary(launcher_logdir)["params_sha256"]


def start_long_run(procs, logdir, num_workers, *args):
    """A launcher run far too long to finish, once its chief has logged step 10."""
    flags = [f"--num_workers={num_workers}", "--train_steps=1000000", "--log_every=10"]
    run = procs.start(launcher_command(f"--logdir={logdir}", *flags, *args))
    run.wait_for_line(r"\[worker:0\] .*step 10/", timeout=RUN_TIMEOUT)
    return run


def test_killed_task_stops_the_cluster_and_is_named(procs, tmp_path):
    """A killed parameter server (a killed worker, and the restart after it, are tested below). Without
    the private network, every port of the cluster listens where anyone on this machine can reach it."""
    run = start_long_run(procs, tmp_path, 1, "--isolate_network=off", "--checkpoint_every=0")
    ports = cluster_ports(tmp_path)
    assert len(ports) == 2 and ports & listening_ports() == ports
    killed_at = time.time()
    os.kill(run.task_pids["ps:0"], signal.SIGKILL)
    assert run.wait(30) == 1
    assert time.time() - killed_at < 10
    assert "ps:0 was killed by signal SIGKILL; stopped the other tasks" in run.output
    # killed before any checkpoint (--checkpoint_every=0): nothing to resume from, and the launcher says so
    assert run.lines[-1] == f"[launch] nothing was checkpointed in {tmp_path}: run the same command to start again"
    assert not [name for name, pid in run.task_pids.items() if alive(pid)]


def listening_ports():
    """TCP ports listening in this process's network namespace (what `ss -ltn` lists), from /proc."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                if state == "0A":  # LISTEN
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def cluster_ports(logdir):
    spec = json.loads((logdir / "cluster_spec.json").read_text())
    return {int(address.rsplit(":", 1)[1]) for hosts in spec["cluster"].values() for address in hosts}


def private_networks_allowed():
    probe = "from parallel_tf.launch.fence import enter_private_network as e; import sys; sys.exit(1 if e() else 0)"
    return subprocess.run([sys.executable, "-c", probe], cwd=REPO, timeout=30).returncode == 0


# How a launch starts its tasks: forked by a fork server the warm server forked for it (this module's launches),
# forked by a fork server of its own, or each a process
STARTS = {"forked by the warm server": True, "forked": True, "a process a task": False}


def started_as(start, monkeypatch):
    """The launcher's --fork_tasks for `start` (STARTS), the warm server's variable dropped for a fork server of
    its own."""
    if start == "forked":
        monkeypatch.delenv(warm_client.SOCKET_VARIABLE)
    return f"--fork_tasks={str(STARTS[start]).lower()}"


@pytest.mark.parametrize("start", STARTS)
def test_ctrl_c_to_the_launcher_stops_every_task_of_a_cluster_no_one_outside_can_reach(
    procs, tmp_path, start, monkeypatch
):
    """In its private network none of the cluster's ports can be seen from here (the kill test below runs
    without it and sees them all: TF listens on every interface). SIGTERM goes to the same handler. Tasks forked
    by a fork server (its own, or the warm server's child, which joined its network) and tasks started each as a
    process of its own are stopped alike."""
    if not private_networks_allowed():
        pytest.skip("this kernel does not allow unprivileged user and network namespaces")
    # Ports listening here already (this test process's in-process servers) may share a number with the
    # cluster's: inside its own network the launcher finds every port free.
    listening_before = listening_ports()
    run = start_long_run(
        procs, tmp_path, 1, "--isolate_network=on", "--checkpoint_every=0", started_as(start, monkeypatch)
    )
    ports = cluster_ports(tmp_path)
    assert len(ports) == 2 and ports & (listening_ports() - listening_before) == set()
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.wait(30) == 128 + signal.SIGINT
    assert "SIGINT: stopping all tasks" in run.output
    assert f"nothing was checkpointed in {tmp_path}: run the same command to start again\n" in run.output + "\n"
    assert len(run.task_pids) == 2 and len(run.fork_server_pids) == STARTS[start]
    assert ("of the warm server at" in run.output) == (start == "forked by the warm server")
    assert not [pid for pid in [*run.task_pids.values(), *run.fork_server_pids] if alive(pid)]


@pytest.mark.parametrize("start", STARTS)
def test_a_launcher_killed_outright_takes_every_task_with_it(procs, tmp_path, start, monkeypatch):
    """SIGKILL leaves the launcher no handler to run: each task gets its parent's death signal (fence.py), a forked
    task from the fork server, which got it from the launcher (its own), or saw the launcher's connection close (the
    warm server's child)."""
    run = start_long_run(procs, tmp_path, 1, "--checkpoint_every=0", started_as(start, monkeypatch))
    os.kill(run.proc.pid, signal.SIGKILL)
    assert run.wait(30) == -signal.SIGKILL
    pids = [*run.task_pids.values(), *run.fork_server_pids]
    assert len(pids) == 2 + STARTS[start]
    assert ("of the warm server at" in run.output) == (start == "forked by the warm server")
    deadline = time.time() + 10
    while [pid for pid in pids if alive(pid)] and time.time() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]


def test_simulated_hosts_run_hierarchical_groups_by_host(procs, tmp_path):
    """Two simulated hosts, one group each: every host's tasks listen on the same port numbers, the
    groups exchange with the central ps over the bridge, and nothing on this machine's network can
    reach them."""
    if not private_networks_allowed():
        pytest.skip("this kernel does not allow unprivileged user and network namespaces")
    flags = ["--simulate_hosts=2", "--mode=hierarchical", "--groups=by_host", "--num_workers=2", "--central_every=5"]
    listening_before = listening_ports()
    run = procs.start(launcher_command(f"--logdir={tmp_path}", *STEPS, *flags))
    run.wait_for_line(r"\[ps:0\] .*serving at 10\.77\.0\.1:2222", timeout=RUN_TIMEOUT)
    # The hosts' bridge and ports exist only inside the launcher's network namespace, not in this one.
    assert "ptf0" not in [name for _, name in socket.if_nameindex()]
    assert {2222, 2223, 2224} & (listening_ports() - listening_before) == set()
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    spec = json.loads((tmp_path / "cluster_spec.json").read_text())
    assert spec["cluster"] == {
        "ps": ["10.77.0.1:2222"],
        "local_ps": ["10.77.0.1:2223", "10.77.0.2:2222"],
        "worker": ["10.77.0.1:2224", "10.77.0.2:2223"],
    }
    assert spec["groups"] == [[0], [1]]
    assert read_summary(tmp_path)["central_exchanges_by_group"] == [20, 20]  # train_steps / central_every each
    assert "of every interface" not in run.output  # no exposure warnings: the launcher told its tasks they are fenced
    assert not [name for name, pid in run.task_pids.items() if alive(pid)]


def kill_worker_after_checkpoint(run, logdir, step):
    """Freezes worker:1 once the chief has logged `step` (lockstep: the chief cannot get past step + 1),
    waits for that step's checkpoint, then kills the worker."""
    run.wait_for_line(rf"\[worker:0\] .*step {step}/", timeout=RUN_TIMEOUT)
    pid = run.task_pids["worker:1"]
    os.kill(pid, signal.SIGSTOP)
    deadline = time.time() + 30
    while f'model.ckpt-{step}"' not in (logdir / "checkpoint").read_text():  # the saver's index of checkpoints
        assert time.time() < deadline, run.output
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def test_strict_run_goes_on_with_fewer_workers_and_ends_on_the_uninterrupted_result(procs, tmp_path):
    """Restarts and deterministic elasticity: strict, 2 workers, --max_restarts=1, worker:1 killed after
    the step-40 checkpoint. The launcher stops the rest and restarts the cluster without it
    (--min_workers=1); the chief resumes at step 40, and the run on 1 worker ends bitwise on the
    uninterrupted strict run's parameters (strict arithmetic does not depend on the worker count; the
    reference trains in-process). A restart with every worker takes the same path (the launcher's
    choice of workers is tests/test_cluster_config.py's)."""
    strict = ["--strict_determinism", "--microbatches=8"]
    logdir = tmp_path / "elastic"
    # worker:0 pauses 20 ms a step (a straggler: the same parameters), so the pair is still short of the
    # next checkpoint when the test freezes worker:1; at 2-4 ms a step it could pass it first. (A delay for
    # worker:1 would keep the restart from dropping it.)
    flags = [*STEPS, *strict, "--checkpoint_every=20", "--max_restarts=1", "--min_workers=1", "--worker_delay_ms=0:20"]
    run = procs.start(launcher_command(f"--logdir={logdir}", *flags))
    kill_worker_after_checkpoint(run, logdir, 40)
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    restart = (
        "worker:1 was killed by signal SIGKILL; stopped the other tasks; restart 1 of 1 from the latest checkpoint"
    )
    assert f"{restart} with 1 workers" in run.output
    assert re.search(r"\[worker:0\] .*resuming from .*model\.ckpt-40 at step 40/100", run.output)
    metrics = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [20, 40, 60, 80, 100]  # the killed run's steps 41.. were redone
    assert not [name for name, pid in run.task_pids.items() if alive(pid)]
    assert len(json.loads((logdir / "cluster_spec.json").read_text())["cluster"]["worker"]) == 1
    summary = read_summary(logdir)
    assert summary["num_workers"] == 1
    reference = models.sha(tmp_path / "reference", "sync", strict_determinism=True, microbatches=8, train_steps=100)
    assert summary["params_sha256"] == reference


def test_a_killed_allreduce_worker_is_named_and_the_restart_ends_on_the_uninterrupted_run(procs, tmp_path):
    """All-reduce, 2 workers, --max_restarts=1, worker:1 killed after the step-40 checkpoint while the chief
    waits for it inside a collective: the launcher names it at once, restarts both, the chief restores and
    broadcasts, and the run ends on the uninterrupted run's parameters (which are ordered sync's with two
    workers, trained in-process)."""
    logdir = tmp_path / "allreduce"
    # worker:1 pauses 20 ms a step (a straggler: the same parameters), so the pair is still short of the
    # next checkpoint when the test freezes it; at its 4 ms a step it could pass it, or finish.
    flags = [*STEPS, "--mode=allreduce", "--checkpoint_every=20", "--max_restarts=1", "--worker_delay_ms=1:20"]
    run = procs.start(launcher_command(f"--logdir={logdir}", *flags))
    kill_worker_after_checkpoint(run, logdir, 40)
    killed_at = time.time()
    run.wait_for_line(r"\[launch\] worker:1 was killed by signal SIGKILL; stopped the other tasks; restart 1", 10)
    assert time.time() - killed_at < 10
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    # At most the chief's one line, "worker:0 failed: UnavailableError: lost contact with worker:1 (...)" (the
    # launcher may stop it first), and none of TensorFlow's or gRPC's own (compat.py quiets their C++ logs): no
    # "E0000 ... ring_alg.cc", no "GRPC error".
    told = [line for line in run.lines if line.startswith("[worker:0]") and "failed" in line]
    assert len(told) <= 1 and all("lost contact with worker:1" in line for line in told), run.output
    assert not re.search(r"\] (E\d{4} |WARNING: All log messages)|GRPC", run.output), run.output
    assert re.search(r"\[worker:0\] .*resuming from .*model\.ckpt-40 at step 40/100", run.output)
    assert not [name for name, pid in run.task_pids.items() if alive(pid)]
    reference = models.sha(tmp_path / "reference", "sync", train_steps=100)
    assert read_summary(logdir)["params_sha256"] == reference


def test_backup_workers_finish_without_a_killed_worker_and_count_stale_gradients(procs, tmp_path):
    flags = ["--num_workers=2", "--replicas_to_aggregate=1", "--train_steps=600", "--log_every=10"]
    # The ps gives worker:1 --startup_timeout to come back (the run's end waits for that); the workers wait
    # as long for the ps to come up, forked by the warm server, not loading TensorFlow. 600 steps: the chief
    # waits for no one, and the kill must land mid-run.
    run = procs.start(launcher_command(f"--logdir={tmp_path}", *flags, "--startup_timeout=5"))
    run.wait_for_line(r"\[worker:0\] .*step \d+/", timeout=RUN_TIMEOUT)  # steps skipped: 10 may log as 11
    os.kill(run.task_pids["worker:1"], signal.SIGKILL)
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    assert "worker:1 was killed by signal SIGKILL; training goes on without it (backup workers)" in run.output
    assert "worker:1 is gone; carrying on without it" in run.output  # the ps, once it noticed
    summary = read_summary(tmp_path)
    assert (summary["train_steps"], summary["replicas_to_aggregate"], summary["aggregation"]) == (600, 1, "ordered")
    assert summary["gradients_applied"] == 600  # R = 1 a step: the first in, whoever's
    assert sum(summary["gradients_applied_by_worker"]) == 600
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 600 and "stale_gradients_dropped" in metrics[-1]
    assert not [name for name, pid in run.task_pids.items() if alive(pid)]


def test_worker_without_parameter_server_gives_up_naming_it(procs):
    """With the exit code a TFJob manifest gives a failure a restart can cure (1 by default, as the
    parameter server's test below checks)."""
    ps_address, worker_address = free_loopback_addresses(2)  # nothing listens on the ps port
    started = time.time()
    run = procs.start(
        recipe_command(f"--ps_hosts={ps_address}", f"--worker_hosts={worker_address}", "--job_name=worker")
        + ["--startup_timeout=3", "--failure_exit_code=138"]
    )
    assert run.wait(60) == 138
    assert f"cannot reach ps:0 at {ps_address} within --startup_timeout=3s" in run.output
    assert time.time() - started < 3 + 5  # it waits before TensorFlow is even imported


def test_parameter_server_gives_up_on_a_worker_that_never_comes(procs):
    ps_address, worker_address = free_loopback_addresses(2)
    run = procs.start(
        recipe_command(f"--ps_hosts={ps_address}", f"--worker_hosts={worker_address}", "--job_name=ps")
        + ["--startup_timeout=3"]
    )
    assert run.wait(60) == 1
    assert f"ps:0 failed: worker:0 at {worker_address} is not running and has not finished" in run.output


def test_a_cosine_run_stopped_mid_way_resumes_only_with_its_schedule_and_then_ends_on_the_straight_runs_bits(
    procs, tmp_path
):
    """Sync, 2 workers, --lr_schedule=cosine over 100 steps, worker:1 killed after the step-40 checkpoint and
    no restart: the launcher stops the run. The same command without --lr_schedule would train steps 40..100
    at a constant rate: it is refused, in one line, before any task starts. With it, the run ends on the
    uninterrupted run's parameters (trained in-process)."""
    logdir = tmp_path / "cosine"
    flags = [*STEPS, "--checkpoint_every=20", "--worker_delay_ms=1:20"]
    run = procs.start(launcher_command(f"--logdir={logdir}", *flags, "--lr_schedule=cosine"))
    kill_worker_after_checkpoint(run, logdir, 40)
    assert run.wait(RUN_TIMEOUT) == 1, run.output
    without = procs.start(launcher_command(f"--logdir={logdir}", *flags))
    assert without.wait(RUN_TIMEOUT) == 2, without.output
    assert without.lines == [
        f"error: --logdir={logdir} holds an unfinished run that this command is not: learning_rate_schedule."
        + without.lines[0].split("learning_rate_schedule.", 1)[1]
    ]
    assert "lr_schedule cosine, here constant" in without.output and "started" not in without.output
    resumed = procs.start(launcher_command(f"--logdir={logdir}", *flags, "--lr_schedule=cosine"))
    assert resumed.wait(RUN_TIMEOUT) == 0, resumed.output
    assert re.search(r"\[worker:0\] .*resuming from .*model\.ckpt-40 at step 40/100", resumed.output)
    reference = models.sha(tmp_path / "reference", "sync", train_steps=100, lr_schedule="cosine")
    assert read_summary(logdir)["params_sha256"] == reference


def test_a_task_that_dies_after_the_chief_finished_the_run_leaves_it_a_success(procs, tmp_path):
    """A recipe whose chief writes the run's summary and exits 0 while worker:1 exits 1 after it: with
    --max_restarts=1 the launcher does not restart a finished run (the restart would refuse its logdir, as
    holding a finished run); it says what died and exits 0 with the run's result."""
    recipe = tmp_path / "finished_then_died.py"
    recipe.write_text(
        textwrap.dedent(
            """\
            import json, os, sys, time
            args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
            if "--check_flags" in sys.argv or args.get("job_name") == "ps":
                sys.exit(0)
            if args["task_index"] == "0":
                summary = {"train_steps": 100, "eval_accuracy": 0.5, "final_loss": 1.0, "ms_per_step": 1.0,
                           "params_sha256": "0" * 64}
                with open(os.path.join(args["logdir"], "summary.json"), "w") as f:
                    json.dump(summary, f)
                sys.exit(0)
            time.sleep(1)
            sys.exit(1)
            """
        )
    )
    logdir = tmp_path / "run"
    run = procs.start(launcher_command(f"--recipe={recipe}", f"--logdir={logdir}", *STEPS, "--max_restarts=1"))
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    assert (
        "[launch] worker:1 exited with status 1 after the chief finished the run; stopped the other tasks" in run.output
    )
    assert "restart" not in run.output and "params_sha256 " + "0" * 64 in run.output


def fresh_start(procs, cwd, *flags):
    """`./run_local_cluster.sh --logdir=runs/exp1 FLAGS --fresh` in `cwd`, one worker, 10 steps: its output."""
    command = launcher_command("--logdir=runs/exp1", "--num_workers=1", "--train_steps=10", *flags, "--fresh")
    run = procs.start(["env", "-C", str(cwd), *command])
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    return run


@pytest.mark.parametrize(
    "old",
    [
        pytest.param({"summary.json": {"train_steps": 10}, "run.json": {"seed": 0}}, id="a finished run"),
        pytest.param({"run.json": {"seed": 7}, "metrics.jsonl": ""}, id="an unfinished run with other flags"),
    ],
)
def test_fresh_through_the_launcher_moves_the_old_run_aside_and_starts_over(procs, tmp_path, old):
    """docs/failures-and-security.md's `./run_local_cluster.sh --logdir=runs/exp1 --fresh`, where runs/exp1 holds
    a run the same command without --fresh refuses: the old folder is kept whole beside the new run."""
    exp1 = tmp_path / "runs" / "exp1"
    exp1.mkdir(parents=True)
    for name, content in old.items():
        (exp1 / name).write_text(json.dumps(content) if content != "" else "")
    run = fresh_start(procs, tmp_path)
    (moved,) = [path for path in (tmp_path / "runs").iterdir() if path.name.startswith("exp1.old-")]
    assert f"[launch] --fresh: moved the old runs/exp1 aside to runs/{moved.name}" in run.output
    assert {path.name: path.read_text() for path in moved.iterdir()} == {
        name: json.dumps(content) if content != "" else "" for name, content in old.items()
    }
    assert read_summary(exp1)["train_steps"] == 10 and json.loads((exp1 / "run.json").read_text())["seed"] == 0


def test_a_resume_under_another_environment_that_moves_the_bits_is_refused_before_any_task(procs, tmp_path):
    """A 10-step --kernels=fast run (oneDNN's code picked by this CPU) resumed to 20 with oneDNN's instruction set
    capped: another run's arithmetic, refused in one line before any task starts; with its ops switched off, not
    the kernels the run had, refused too; with the same environment the resume goes ahead."""
    logdir = tmp_path / "fast"
    flags = [f"--logdir={logdir}", "--num_workers=1", "--kernels=fast"]
    first = procs.start(launcher_command(*flags, "--train_steps=10"))
    assert first.wait(RUN_TIMEOUT) == 0, first.output
    refusals = {
        "ONEDNN_MAX_CPU_ISA=AVX2": f"--logdir={logdir} holds a run finished at step 10 that this command is not: "
        "environment.ONEDNN_MAX_CPU_ISA unset, here AVX2; a resume may change --train_steps, --num_workers, "
        "--num_ps, --steps_per_run, --link_rate, --link_delay, --link_loss or --pipeline_pieces, nothing else: "
        "give its flags, another --logdir, or --fresh to start over",
        # "false", not "0": this test process loaded TensorFlow with "0", which its children take for its pin
        "TF_ENABLE_ONEDNN_OPTS=false": "TF_ENABLE_ONEDNN_OPTS=false in the environment asks for portable's kernels, "
        "and the run's are --kernels=fast: unset it, or choose --kernels=portable",
    }
    for environment, refusal in refusals.items():
        resumed = procs.start(["env", environment, *launcher_command(*flags, "--train_steps=20")])
        assert resumed.wait(RUN_TIMEOUT) == 2, resumed.output
        assert resumed.lines == [f"error: {refusal}"]
    resumed = procs.start(launcher_command(*flags, "--train_steps=20"))
    assert resumed.wait(RUN_TIMEOUT) == 0, resumed.output
    assert read_summary(logdir)["train_steps"] == 20
