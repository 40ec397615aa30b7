"""The Slurm commands of docs/launching.md on a real Slurm: srun and sbatch on the cluster that
scripts/slurm_local.sh brings up (.ci/run brings up two nodes, sn1 and sn2, each a network
namespace with its own slurmd). Without one, every test here is skipped with the reason.

The faked environments of test_slurm.py check the resolver's rules; these check that Slurm's own
variables, as srun really sets them, give the cluster those rules promise."""

import json
import re
import subprocess
import time
import uuid

import pytest
from conftest import REPO, RUN_TIMEOUT, SYNC_STEPS, read_summary, slurm_command, slurm_is_up

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

PORT_BASE = 8888
PYTHON = str(REPO / ".venv" / "bin" / "python")  # by path: srun's tasks do not inherit an activated venv
RECIPE = [PYTHON, "recipes/mnist.py"]
# Each node declares 6 CPUs (scripts/slurm_local.sh): with 2 a task, a node takes at most 3 tasks.
AT_MOST_3_A_NODE = ["--cpus-per-task=2"]
SLURM_RECIPE = [*RECIPE, "--cluster_resolver=slurm", "--num_ps=1", f"--port_base={PORT_BASE}"]

# What each task of a step sees: its host, its Slurm ids, and the cluster the resolver makes of them.
PLACEMENT_PROBE = f"""
import json, os, socket, sys
from parallel_tf.cluster import slurm
from parallel_tf.training import modes
mode, groups = sys.argv[1:]
placement = slurm.placement(os.environ, *modes.server_counts(mode, 1, 0), {PORT_BASE}, groups=groups)
print(json.dumps({{
    "rank": int(os.environ["SLURM_PROCID"]), "local": int(os.environ["SLURM_LOCALID"]),
    "host": socket.gethostname(), "task": [placement.job_name, placement.task_index],
    "cluster": json.loads(placement.cluster.to_json()),
}}))
"""


@pytest.fixture(scope="session")  # as wide as sync_two_workers, so that a skip comes before that run
def two_nodes():
    if not slurm_is_up():
        pytest.skip("no local Slurm is up: `scripts/slurm_local.sh up --nodes=2` starts one (as root it installs it)")
    nodes = subprocess.run(slurm_command("sinfo", "-h", "-o", "%D"), capture_output=True, text=True, timeout=30)
    if int(nodes.stdout.split()[0]) < 2:
        pytest.skip(f"the local Slurm has {nodes.stdout.strip()} node: `scripts/slurm_local.sh up --nodes=2`")


@pytest.fixture
def jobs(procs):
    """Names for this test's Slurm jobs; whatever is left of them is cancelled at the end."""
    names = []

    def name():
        names.append(f"ptf-test-{uuid.uuid4().hex[:8]}")
        return names[-1]

    yield name
    for job in names:
        subprocess.run(slurm_command("scancel", f"--name={job}"), capture_output=True, timeout=30)


def srun(jobs, *args):
    return slurm_command("srun", f"--job-name={jobs()}", "--time=5", "--kill-on-bad-exit=1", *args)


def finished_job(job, timeout):
    """(JobState, ExitCode) of `job` once it has ended. sbatch --wait would do, but it polls every
    30 s here, longer than the job takes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        show = slurm_command("scontrol", "-o", "show", "job", job)
        shown = subprocess.run(show, capture_output=True, text=True, timeout=30)
        fields = dict(re.findall(r"(\w+)=(\S+)", shown.stdout))
        if fields.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return fields["JobState"], fields["ExitCode"]
        time.sleep(0.5)
    pytest.fail(f"Slurm job {job} still running after {timeout}s")


def probe(jobs, distribution, tasks, mode="sync", groups="interleaved"):
    """Every task's view of a step of `tasks` tasks on both nodes, at most 3 a node, by rank."""
    command = srun(jobs, "-N2", f"-n{tasks}", *AT_MOST_3_A_NODE, f"--distribution={distribution}", PYTHON)
    done = subprocess.run(
        [*command, "-c", PLACEMENT_PROBE, mode, groups], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda task: task["rank"])


@pytest.mark.parametrize("distribution", ["block", "cyclic"])
def test_every_task_gets_an_address_on_its_own_node_at_port_base_plus_its_local_id(two_nodes, jobs, distribution):
    tasks = probe(jobs, distribution, 5)
    assert {task["host"] for task in tasks} == {"sn1", "sn2"}
    cluster = tasks[0]["cluster"]
    assert all(task["cluster"] == cluster for task in tasks)  # every task makes the same cluster
    for task in tasks:
        job, index = task["task"]
        assert cluster["cluster"][job][index] == f"{task['host']}:{PORT_BASE + task['local']}"
    assert [task["task"] for task in tasks] == [["ps", 0]] + [["worker", i] for i in range(4)]  # jobs by rank
    hosts = [task["host"] for task in tasks]
    if distribution == "cyclic":
        assert hosts[:2] == ["sn1", "sn2"]  # dealt out one per node
    else:
        assert hosts == sorted(hosts)  # node 1 filled first


def test_groups_by_host_make_one_group_per_node(two_nodes, jobs):
    tasks = probe(jobs, "block", 6, mode="hierarchical", groups="by_host")
    cluster = tasks[0]["cluster"]
    for group, local_ps in enumerate(cluster["cluster"]["local_ps"]):
        members = {cluster["cluster"]["worker"][w].split(":")[0] for w in cluster["groups"][group]}
        assert members == {local_ps.split(":")[0]}  # a group's workers share its local ps's node
    assert sorted(address.split(":")[0] for address in cluster["cluster"]["local_ps"]) == ["sn1", "sn2"]


def test_sbatch_example_killed_on_its_step_and_submitted_again_ends_on_the_launchers_parameters(
    two_nodes, jobs, sync_two_workers, tmp_path
):
    """examples/slurm_sync.sbatch, scaled to 3 tasks (1 ps + 2 workers) on the two nodes and 100
    steps. `scancel --signal=KILL` on its step kills every task at once, srun reports it and the job
    fails; submitted again, it resumes from the chief's last checkpoint and ends on the launcher's
    params_sha256, as if nothing had happened. Worker 1 pauses 30 ms before each step (timing only: sync
    trains the same bits), so 60 steps, 1.8 s, are left when the kill is sent: at 10 steps a run, the
    default, the rest of a plain run ends before scancel lands."""
    _, launcher_logdir = sync_two_workers
    logdir = tmp_path / "run"
    args = [*SYNC_STEPS, "--checkpoint_every=20", "--worker_delay_ms=1:30", f"--logdir={logdir}"]
    killed, killed_output = submit_example(jobs, tmp_path / "killed.out", args)
    wait_for_text(killed_output, "step 40/100")
    subprocess.run(slurm_command("scancel", "--signal=KILL", f"{killed}.0"), check=True, timeout=30)
    assert finished_job(killed, RUN_TIMEOUT)[0] == "FAILED"
    assert re.search(r"srun: error: sn\d: tasks? [\d,-]+: Killed", killed_output.read_text())
    again, output = submit_example(jobs, tmp_path / "again.out", args)
    assert finished_job(again, RUN_TIMEOUT) == ("COMPLETED", "0:0"), output.read_text()
    assert re.search(r"resuming from .*model\.ckpt-(40|60|80) at step (40|60|80)/100", output.read_text())
    assert "all workers finished; ps:0 exiting" in output.read_text()
    summary = read_summary(logdir)
    assert summary["num_workers"] == 2
    assert summary["params_sha256"] == read_summary(launcher_logdir)["params_sha256"]


def submit_example(jobs, output, recipe_args):
    """The job id of examples/slurm_sync.sbatch submitted for 3 tasks, and its output file."""
    command = ["sbatch", "--parsable", f"--job-name={jobs()}", "--ntasks=3", f"--output={output}"]
    script = str(REPO / "examples" / "slurm_sync.sbatch")
    done = subprocess.run(
        slurm_command(*command, script, *recipe_args), capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), output


def wait_for_text(path, text, timeout=RUN_TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    pytest.fail(f"no {text!r} in {path} within {timeout}s")


@pytest.mark.parametrize(
    "tasks, flags",
    [(3, ["--mode=async"]), (5, ["--mode=hierarchical", "--groups=by_host"])],
    ids=["async", "hierarchical by host"],
)
def test_async_and_hierarchical_by_host_train_across_two_nodes(two_nodes, jobs, procs, tmp_path, tasks, flags):
    nodes = ["-N2", f"-n{tasks}", *AT_MOST_3_A_NODE]  # hierarchical: ps, local ps, worker | local ps, worker
    run = procs.start(srun(jobs, *nodes, *SLURM_RECIPE, *flags, *SYNC_STEPS, f"--logdir={tmp_path}"))
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    assert "all workers finished; ps:0 exiting" in run.output  # the central ps stopped by itself
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 100 and metrics[-1]["loss"] < metrics[0]["loss"] / 2
    summary = read_summary(tmp_path)
    assert (summary["mode"], summary["num_workers"]) == (flags[0].split("=")[1], 2)
