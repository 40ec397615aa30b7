"""Each mode's graph, built in-process (no servers): where its ops and variables are placed.

GPU pinning is checked here for every mode with a pretend count of 2 GPUs: building a graph
needs no GPU, only the device strings the builders assign.
"""

import numpy as np
import pytest

from parallel_tf.cluster import config as cluster
from parallel_tf.compat import tf
from parallel_tf.data.sharding import Dataset
from parallel_tf.graph.layers import dense
from parallel_tf.training import declarations, modes, run_check, seams
from parallel_tf.training import settings as settings_lib
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.techniques import clipping, compression
from parallel_tf.training.trainer import build_graph

SPECS = {
    "sync": {"cluster": {"ps": ["a:1", "a:2"], "worker": ["a:3", "a:4", "a:5"]}},
    "async": {"cluster": {"ps": ["a:1", "a:2"], "worker": ["a:3", "a:4", "a:5"]}},
    "hierarchical": {
        "cluster": {"ps": ["a:1"], "local_ps": ["a:2", "a:3"], "worker": ["a:4", "a:5", "a:6"]},
        "groups": [[0, 2], [1]],
    },
    "allreduce": {"cluster": {"worker": ["a:3", "a:4", "a:5"]}},
}
FIELDS = dict(  # Settings fields of every build; a test's own are the flags it gives
    job_name="worker",
    global_batch_size=6,
    train_steps=10,
    learning_rate=0.1,
    optimizer="adagrad",
    seed=0,
    logdir=None,
    dataset="tiny",
    startup_timeout=60,
    num_gpus=2,
)
MODE_OPTIONS = dict(microbatches=6, push_every=2, fetch_every=3, central_every=2)  # each where its mode takes it
DATA = Dataset(np.zeros((4, 6), np.float32), np.zeros(4, np.int64), None, None, num_classes=3, name="tiny")


def two_layers(features, num_classes):
    return dense(dense(features, 5, "hidden", activation=tf.nn.relu), num_classes, "logits")


TWO_LAYERS = Recipe(name="two_layers", model_fn=two_layers, datasets={})


def build(mode, task_index, options=None, **fields):
    """Builds worker `task_index`'s graph from Settings made, checked and composed as a task makes them
    (settings.run_settings); `fields` and technique `options` are the flags the test gives."""
    config = cluster.parse(SPECS[mode], mode) if mode in SPECS else None  # the one plain process: none
    graph = tf.Graph()
    settings = settings_lib.run_settings(
        set(fields) | set(options or {}),
        mode=mode,
        task_index=task_index,
        cluster=config,
        **{**FIELDS, **_of_mode(mode), **fields, **(options or {})},
    )
    with graph.as_default():
        built = build_graph(TWO_LAYERS, DATA, settings)
    for value in vars(built).values():  # never run here: TF would warn they went unused
        getattr(value, "mark_used", lambda: None)()
    return graph, built


def _of_mode(mode):
    return {name: value for name, value in MODE_OPTIONS.items() if mode in run_check.DECLARED_SCOPES[name]}


@pytest.mark.parametrize("mode", modes.BY_NAME)
def test_a_modes_step_calls_the_hooks_of_the_seams_it_offers_and_no_other(mode, monkeypatch):
    """rules.compose counts a seam only in a mode that offers it (Mode.offers, with build and wrap in every mode),
    so a mode that called another seam's hooks would run two owners the rules never refused, and one that offered
    a seam it never calls would silently drop the technique filling it. The ring is filled by options that set
    values its sums read, not by a hook."""
    asked = _hooks_asked_for(monkeypatch)
    build(mode, 0, optimizer="sgd")  # hierarchical's --central_every=2 takes no other
    assert asked == {*declarations.EVERY_MODE_SEAMS, *modes.BY_NAME[mode].offers} - {"ring"}


BUILDERS = {  # each technique that builds a mode's graph itself, in each of its modes, with 2 of the 3 workers
    "backup_workers sync": ("sync", {"replicas_to_aggregate": 2}),
    "local_sgd sync": ("sync", {"local_steps": 2}),
    "easgd sync": ("sync", {"easgd_alpha": 0.25, "easgd_period": 2}),
    "easgd async": ("async", {"easgd_alpha": 0.25, "easgd_period": 2}),
}


@pytest.mark.parametrize("mode, options", BUILDERS.values(), ids=BUILDERS)
def test_a_technique_that_builds_the_graph_calls_the_mode_hooks_its_declaration_lists(mode, options, monkeypatch):
    """rules.py closes the mode hooks its `calls` leaves out to every other technique, and lets the rest chain."""
    asked = _hooks_asked_for(monkeypatch)
    build(mode, 0, options)
    builder = run_check.DECLARED_BY[next(iter(options))]
    assert "build" in asked and asked - set(declarations.EVERY_MODE_SEAMS) == set(builder.calls)


def test_every_technique_that_builds_a_graph_is_built_here_in_each_of_its_modes():
    builders = [d for d in run_check.DECLARATIONS if "build" in d.hooks]
    assert {f"{d.name} {mode}" for d in builders for mode in modes.NAMES if mode in d.modes} == set(BUILDERS)


def _hooks_asked_for(monkeypatch):
    """The seams whose hooks a graph's building reads (settings.hooks.<seam>), as it reads them."""
    asked = set()
    read = seams.Hooks.__getattribute__

    def reading(hooks, name):
        if name in declarations.HOOKS:
            asked.add(name)
        return read(hooks, name)

    monkeypatch.setattr(seams.Hooks, "__getattribute__", reading)
    return asked


def test_a_runs_hooks_of_a_seam_are_its_declarations_modules_in_wrapping_order():
    """What a step calls for a seam (settings.hooks, seams.Hooks): the module of each declaration on that fills it
    (compression's and clipping's HOOKS, whose hooks share graph state), in the order of TECHNIQUES (8-bit codes
    wrap a sync graph before clipping does); none for a seam nothing on fills, where the mode goes its own way."""
    flags = {"gradient_compression": "8bit", "clip_norm": 1.0}
    settings = settings_lib.run_settings(
        set(flags), mode="sync", task_index=0, cluster=cluster.parse(SPECS["sync"], "sync"), **{**FIELDS, **flags}
    )
    codes, clips = compression.HOOKS, clipping.HOOKS
    assert settings.hooks == seams.Hooks(wrap=(codes, clips), transmit=(codes,), optimizer=(clips,))


@pytest.mark.parametrize("declared", run_check.DECLARATIONS, ids=[d.name for d in run_check.DECLARATIONS])
def test_every_hook_of_a_declaration_is_offered_by_a_mode_it_applies_to(declared):
    """Else the hook would never be called: compression's transmit is sync's and async's, its reduce all-reduce's."""
    offered = {
        *declarations.EVERY_MODE_SEAMS,
        *(s for m in modes.BY_NAME if m in declared.modes for s in modes.BY_NAME[m].offers),
    }
    assert set(declared.hooks) <= offered


@pytest.mark.parametrize(
    "mode, fields",
    [
        ("sync", {}),
        ("sync", {"strict_determinism": True}),
        ("sync", {"aggregation": "accumulator"}),
        ("async", {}),
        ("hierarchical", {"optimizer": "sgd"}),  # one adagrad step on a group's sum is not its steps: refused
    ],
    ids=["sync", "sync-strict", "sync-accumulator", "async", "hierarchical"],
)
def test_every_mode_computes_on_the_workers_gpu_and_keeps_parameters_on_the_ps(mode, fields):
    graph, _ = build(mode, 1, **fields)
    matmuls = {op.device for op in graph.get_operations() if op.type == "MatMul"}
    assert matmuls == {"/job:worker/task:1/device:GPU:1"}
    parameters = graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)
    names = [f"model/{layer}/{p}:0" for layer in ("hidden", "logits") for p in ("weights", "biases")]
    assert [v.name for v in parameters] == names
    assert all(v.device.startswith("/job:ps/") for v in parameters)


@pytest.mark.parametrize("fields", [{}, {"strict_determinism": True}], ids=["ordered", "strict"])
def test_allreduce_keeps_every_variable_on_the_workers_gpu_and_talks_through_one_nccl_collective(fields):
    """A step's gradients travel in one all-reduce (ordered) or one all-gather (strict), device to device
    by NCCL; the broadcast and the end-of-run fingerprint gather are the others."""
    graph, _ = build("allreduce", 1, **fields)
    assert {v.device for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)} == {
        "/job:worker/task:1/device:GPU:1"
    }
    collectives = [op for op in graph.get_operations() if op.type.startswith("Collective")]
    step = "CollectiveGather" if fields else "CollectiveReduce"
    assert [op.type for op in collectives].count(step) == (2 if fields else 1)  # strict: + the fingerprints'
    assert {op.get_attr("communication_hint").decode() for op in collectives} == {"nccl"}
    assert {op.get_attr("group_size") for op in collectives} == {3}
    keys = [op.get_attr("instance_key") for op in collectives]
    assert len(set(keys)) == len(keys)  # each its own instance, numbered alike on every worker


def test_an_ssp_workers_fetch_at_the_end_of_a_step_reads_after_the_next_steps_gate():
    """SSP's promise is about reads: with --prefetch the fetch for step c + 1 ends step c's run, so it must wait
    for the gate that step c's push opens (after_push), not only for the push. The process's first fetch is a
    run of its own, after its first gate's (a run before it: test_loops.py counts it). One step a run, so each is
    built once."""
    graph, _ = build("async", 0, {"max_staleness": 0, "steps_per_run": 1})
    gates = [op for op in graph.get_operations() if op.type == "ScatterMax"]  # the largest gap, at each gate
    fetches = [
        op
        for op in graph.get_operations()
        if op.type == "Assign" and op.inputs[0].op.name == "read_step" and op.inputs[1].op.type != "Const"
    ]
    assert len(gates) == len(fetches) == 2
    assert sorted(len(_ancestors(fetch) & set(gates)) for fetch in fetches) == [0, 1]


def _ancestors(op):
    """Every op `op` waits for, through its inputs and control inputs."""
    seen, stack = set(), [op]
    while stack:
        later = stack.pop()
        for before in (*(tensor.op for tensor in later.inputs), *later.control_inputs):
            if before not in seen:
                seen.add(before)
                stack.append(before)
    return seen


def test_async_workers_compute_on_a_local_copy():
    graph, built = build("async", task_index=2)
    copies = graph.get_collection(tf.GraphKeys.LOCAL_VARIABLES)
    assert {v.device for v in copies} == {"/job:worker/task:2/device:GPU:0"}
    # with --fetch_every=3, Downpour's local updates are on and the chief counts its own
    assert built.counters.keys() == {"updates_by_worker", "staleness_histogram", "local_updates_applied"}
    # Downpour's schedule: fetch before steps 0, 3, 6, 9; push after steps 1, 3, 5, 7, 9
    plans = [built.runs(step) for step in range(FIELDS["train_steps"])]
    assert [step for step, runs in enumerate(plans) if len(runs) == 2] == [0, 3, 6, 9]
    trains = [runs[-1]["train"] for runs in plans]
    pushes = set(trains[1::2])
    assert len(pushes) == 1 and not pushes & set(trains[::2])
    # Downpour's local update (fetch_every > 1): every step also moves the copy, on the worker
    assert {runs[-1]["local_update"].device for runs in plans} == {"/job:worker/task:2/device:GPU:0"}


def test_a_resumed_async_worker_fetches_before_its_first_step():
    """Resumed at step 1, which --fetch_every=3 would not fetch before, a worker still reads the parameters
    before it computes; then the schedule goes on (no fetch before 2, one before 3)."""
    _, built = build("async", task_index=1)
    assert [len(built.runs(step)) for step in (1, 2, 3)] == [2, 1, 2]


def test_hierarchical_groups_train_on_their_own_local_ps():
    graph, built = build("hierarchical", task_index=2, optimizer="sgd")  # group 0, not its chief (worker 0 is)
    on_local_ps = {v.device for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) if "local_ps" in v.device}
    assert on_local_ps == {"/job:local_ps/task:0/device:CPU:0"}
    assert built.initialise_on_join is None  # only a group's chief initialises its local ps
    _, chief_of_group_1 = build("hierarchical", task_index=1, optimizer="sgd")
    assert chief_of_group_1.initialise_on_join is not None
    assert built.counters.keys() == {"central_exchanges_by_group"}


def test_ordered_sync_keeps_each_gradient_slot_and_its_sum_next_to_its_variable():
    graph, _ = build("sync", 0, strict_determinism=True)
    parameters = graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)
    slots = {v.op.name: v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) if "gradient_slots" in v.name}
    for parameter in parameters:
        slot = slots[parameter.op.name.replace("/", "_") + "_gradient_slots"]
        assert slot.device == parameter.device
        assert slot.shape.as_list() == [6, *parameter.shape.as_list()]  # one per microbatch, whatever N
    sums = {op.device for op in graph.get_operations() if op.type == "Unpack"}
    assert sums <= {p.device for p in parameters}
    # 6 microbatches over 3 workers: worker 0 runs two forward passes of its own besides the step's model on the
    # packed reads (graph/server_vectors.py), whose loss it reports; the model read directly is the chief's to evaluate
    assert len([op for op in graph.get_operations() if op.type == "MatMul" and "gradients" not in op.name]) == 2 * 4


def test_backup_workers_have_no_barrier_and_count_what_the_chief_drops():
    """R of N (2 of 3): no step barrier, which would wait for a dead worker; the step each gradient is
    for is fed; the chief chooses and applies in the background; what it applied, by worker, and what it
    dropped are counters."""
    for task_index in (0, 1):
        graph, built = build("sync", task_index, {"replicas_to_aggregate": 2})
        names = {op.name for op in graph.get_operations()}
        assert not [name for name in names if "parallel_tf_barrier" in name]
        assert built.feed(7) == {built.step_input: 7}
        assert set(built.counters) == {"gradients_applied", "gradients_applied_by_worker", "stale_gradients_dropped"}
        assert "next_step" in built.runs(0)[0] and built.next_step(0, {"next_step": 5}) == 5
        assert not built.chief_waits_for_all
        assert (built.background is not None) == (task_index == 0)


EVERY_STEP = {"push_every": 1, "fetch_every": 1}


@pytest.mark.parametrize(
    "mode, options",
    [
        ("async", {"optimizer": "adam"}),
        ("async", {"staleness_aware": True, "clip_norm": 1.0, **EVERY_STEP}),
        ("async", {"softsync": 1, **EVERY_STEP}),
        ("async", {"adaptive_delay_compensation": 0.1, **EVERY_STEP}),
        ("async", {"easgd_alpha": 0.1, "easgd_period": 2, **EVERY_STEP, "prefetch": False}),
        ("async", {"max_staleness": 1, **EVERY_STEP, "prefetch": False}),
        ("hierarchical", {"optimizer": "sgd"}),
    ],
    ids=[
        "async-adam",
        "async-staleness-aware-clipped",
        "async-softsync",
        "async-dc-asgd-a",
        "async-easgd",
        "async-ssp",
        "hierarchical",
    ],
)
def test_what_workers_change_on_the_parameter_servers_they_change_under_its_lock(mode, options):
    """Async pushes and hierarchical groups' exchanges reach the same variables at once, from several workers,
    and TF1's unlocked update (use_locking=False, every optimizer's default and assign_add's) is a read and then
    a write: of two that overlap, one is lost (a run of 6 async workers, 300 steps each, counted 1799 of its 1800
    pushes in its global step). Every op in a worker's graph that changes a variable on the parameter servers,
    the update, the global step and each counter, takes the variable's lock."""
    graph, _ = build(mode, 1, options)  # hierarchical: worker 1 is its group's chief, which exchanges
    changes = [op for op in graph.get_operations() if "/job:ps/" in op.device and "use_locking" in op.node_def.attr]
    assert {op.type for op in changes} >= {"AssignAdd", "ScatterAdd"}  # the global step, a push's count
    assert [f"{op.type} {op.name}" for op in changes if not op.get_attr("use_locking")] == []
