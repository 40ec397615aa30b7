"""The Slurm resolver on the environments srun sets, faked: host lists, distributions, GPUs."""

import re
from pathlib import Path

import pytest

from parallel_tf.cluster import slurm
from parallel_tf.errors import ConfigError
from parallel_tf.training import modes


def step(nodelist, tasks_per_node, num_tasks, rank, distribution=None, localid=None, **extra):
    environ = {
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_PROCID": str(rank),
        **extra,
    }
    if distribution:
        environ["SLURM_DISTRIBUTION"] = distribution
    if localid is not None:
        environ["SLURM_LOCALID"] = str(localid)
    return environ


@pytest.mark.parametrize(
    "hostlist, hosts",
    [
        ("n1", ["n1"]),
        ("n[9-10]", ["n9", "n10"]),  # natural order: TF's resolver sorts these as strings, n10 first
        ("node[01-03,05]", ["node01", "node02", "node03", "node05"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("a[1-2],b7,c[3]", ["a1", "a2", "b7", "c3"]),
        ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
    ],
)
def test_host_lists_expand_in_slurms_order(hostlist, hosts):
    assert slurm.expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["n[1-2", "n]1[", "n[3-1]", "n[a]", ""])
def test_bad_host_lists_are_named(hostlist):
    with pytest.raises(ConfigError, match="host list"):
        slurm.expand_hostlist(hostlist)


def test_tasks_per_node_repeat_counts():
    assert slurm.expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]


def test_cyclic_deals_ranks_round_robin_skipping_full_nodes():
    assert slurm.node_of_each_rank([2, 1, 3], "block") == [0, 0, 1, 2, 2, 2]
    assert slurm.node_of_each_rank([2, 1, 3], "cyclic") == [0, 1, 2, 0, 2, 2]


def layout(environ_of_rank, num_tasks, **shape):
    """{rank: (job, index, address)} and the cluster every rank resolved (all must agree)."""
    shape = {"mode": "sync", "num_ps": 1, "num_groups": 2, "port_base": 8888, "groups": "interleaved", **shape}
    num_ps, num_groups = modes.server_counts(shape.pop("mode"), shape.pop("num_ps"), shape.pop("num_groups"))
    placements = [slurm.placement(environ_of_rank(rank), num_ps, num_groups, **shape) for rank in range(num_tasks)]
    assert all(p.cluster == placements[0].cluster for p in placements)
    return placements[0].cluster, [(p.job_name, p.task_index) for p in placements]


def test_one_node_three_tasks():
    cluster, tasks = layout(lambda r: step("localhost", "3", 3, r, localid=r), 3)
    assert cluster.as_dict() == {"ps": ["localhost:8888"], "worker": ["localhost:8889", "localhost:8890"]}
    assert tasks == [("ps", 0), ("worker", 0), ("worker", 1)]


def test_an_allreduce_step_is_workers_only():
    cluster, tasks = layout(lambda r: step("n[9-10]", "2(x2)", 4, r, "block", localid=r % 2), 4, mode="allreduce")
    assert cluster.as_dict() == {"worker": ["n9:8888", "n9:8889", "n10:8888", "n10:8889"]}
    assert tasks == [("worker", 0), ("worker", 1), ("worker", 2), ("worker", 3)]


def test_two_nodes_block():
    cluster, tasks = layout(lambda r: step("n[9-10]", "2(x2)", 4, r, "block", localid=r % 2), 4, port_base=2222)
    assert cluster.as_dict() == {"ps": ["n9:2222"], "worker": ["n9:2223", "n10:2222", "n10:2223"]}
    assert tasks == [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]


def test_two_nodes_cyclic():
    cluster, _ = layout(lambda r: step("n[9-10]", "2(x2)", 4, r, "cyclic:block", localid=r // 2), 4)
    assert cluster.as_dict() == {"ps": ["n9:8888"], "worker": ["n10:8888", "n9:8889", "n10:8889"]}


def test_cpu_only_padded_nodes_hierarchical():
    """Four CPU-only nodes with padded names, 2 tasks each: central ps, a local ps per group, workers."""
    cluster, tasks = layout(
        lambda r: step("n[08-11]", "2(x4)", 8, r, localid=r % 2), 8, mode="hierarchical", num_groups=2
    )
    assert cluster.as_dict() == {
        "ps": ["n08:8888"],
        "local_ps": ["n08:8889", "n09:8888"],
        "worker": ["n09:8889", "n10:8888", "n10:8889", "n11:8888", "n11:8889"],
    }
    assert cluster.groups == ((0, 2, 4), (1, 3))
    assert tasks[:4] == [("ps", 0), ("local_ps", 0), ("local_ps", 1), ("worker", 0)]
    assert slurm.narrowed_gpus(step("n[08-11]", "2(x4)", 8, 3, localid=1), "worker") is None  # no GPUs: left alone


def test_gpus_slurm_allocated_are_narrowed_not_replaced():
    environ = step("g1", "3", 3, 2, localid=2, CUDA_VISIBLE_DEVICES="4,6")
    assert slurm.narrowed_gpus(environ, "worker") == "4"  # local id 2 of the node's GPUs 4 and 6
    assert slurm.narrowed_gpus(dict(environ, SLURM_LOCALID="1"), "worker") == "6"
    assert slurm.narrowed_gpus(environ, "ps") == ""  # parameters live on a ps's CPU
    assert slurm.narrowed_gpus(dict(environ, CUDA_VISIBLE_DEVICES="5"), "worker") is None


def test_job_variables_stand_in_for_step_ones():
    environ = {"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}
    placement = slurm.placement(environ, 1, 0, 8888)
    assert (placement.job_name, placement.task_index) == ("worker", 0)


@pytest.mark.parametrize(
    "environ, message",
    [
        ({}, "SLURM_STEP_NODELIST is not set; run the task under srun"),
        (step("n[1-2]", "3", 3, 0), "Slurm gives 2 node(s) (n1, n2) but task counts for 1"),
        (step("n1", "3", 4, 0), "Slurm says 4 tasks but its tasks per node add up to 3"),
        (step("n1", "3", 3, 3), "SLURM_PROCID=3 is not a rank of a 3-task step"),
        (step("n1", "3", 3, "x"), "SLURM_PROCID='x': expected a number"),
        (step("n1", "2(y3)", 2, 0), "SLURM_STEP_TASKS_PER_NODE='2(y3)'"),
        (step("n1", "3", 3, 0, "plane=2"), "SLURM_DISTRIBUTION=plane=2: only block and cyclic"),
        (step("n[1-2]", "2(x2)", 4, 1, "cyclic", localid=1), "SLURM_LOCALID=1, but cyclic distribution puts rank 1"),
        (step("n1", "1", 1, 0), "the Slurm step has 1 task(s): too few for 1 ps and at least one worker"),
    ],
)
def test_bad_environments_name_the_variable(environ, message):
    with pytest.raises(ConfigError) as error:
        slurm.placement(environ, 1, 0, 8888)
    assert message in str(error.value)


def test_the_example_sbatch_script_places_its_tasks():
    """examples/slurm_sync.sbatch: its #SBATCH shape and its task flags give a cluster whose worker
    count divides the default global batch (120)."""
    script = (Path(__file__).resolve().parents[1] / "examples" / "slurm_sync.sbatch").read_text()
    nodes = int(re.search(r"#SBATCH --nodes=(\d+)", script)[1])
    per_node = int(re.search(r"#SBATCH --ntasks-per-node=(\d+)", script)[1])
    num_ps = int(re.search(r"--num_ps=(\d+)", script)[1])
    port_base = int(re.search(r"--port_base=(\d+)", script)[1])
    hosts = f"n[1-{nodes}]"
    placement = slurm.placement(
        step(hosts, f"{per_node}(x{nodes})", nodes * per_node, 1, "block"), num_ps, 0, port_base
    )
    assert (placement.job_name, placement.task_index) == ("worker", 0)
    assert placement.cluster.num_ps == num_ps
    assert 120 % placement.cluster.num_workers == 0


def test_groups_by_host_make_one_group_per_node():
    """Two nodes × 3 tasks, block: node n1 holds the central ps, its group's local ps and one worker;
    node n2 its local ps and two workers."""
    shape = {"mode": "hierarchical", "groups": "by_host"}
    cluster, tasks = layout(lambda r: step("n[1-2]", "3(x2)", 6, r, localid=r % 3), 6, **shape)
    assert cluster.as_dict() == {
        "ps": ["n1:8888"],
        "local_ps": ["n1:8889", "n2:8888"],
        "worker": ["n1:8890", "n2:8889", "n2:8890"],
    }
    assert cluster.groups == ((0,), (1, 2))
    assert tasks == [("ps", 0), ("local_ps", 0), ("worker", 0), ("local_ps", 1), ("worker", 1), ("worker", 2)]
    with pytest.raises(ConfigError, match="the Slurm step: with one group per host, n1 needs a local ps and at least"):
        layout(lambda r: step("n[1-2]", "2,3", 5, r), 5, **shape)
