"""--steps_per_run=k: k steps of the one process, ordered sync, all-reduce or async in one session run
(train_graph.drive) train the parameters that k runs of one step train, bit for bit, and log, checkpoint and
count bytes as those do; what a loop cannot hold is refused with one line; left unset, k is the most, up
to 10, that ends a run at each boundary the trainer acts at."""

import pytest
from inprocess import half_mean_square, linear, scalar_dataset, scalar_recipe, train
from models import DIGITS, FLAGS, MLP, sha

from parallel_tf import compat
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.training import run_check, run_flags
from parallel_tf.training.options import steps_per_run
from parallel_tf.training.settings import run_settings

pytestmark = pytest.mark.inprocess
# A half-precision ring where TensorFlow has one (1.15's CollectiveReduce has none on the CPU: float32 buckets there)
HALF = "float32" if compat.tensorflow_1() else "float16"


def test_three_steps_in_one_run_take_the_worked_out_steps(tmp_path):
    """Sync's worked example (test_arithmetic), its 3 steps in one run: w 0 → 1 → 1.5 → 1.75; the run's
    report is its last step's, the loss of w = 1.5: ½ ((1 - 1.5)² + (3 - 1.5)²) / 2 = 0.625."""
    recipe, data = scalar_recipe(half_mean_square, w0=0.0), scalar_dataset(1, 3)
    run = train(recipe, data, tmp_path, "sync", steps_per_run=3, log_every=3, checkpoint_every=0)
    assert float(run["params"]["model/w:0"][0]) == 1.75
    assert [(m["step"], m["loss"]) for m in run["metrics"]] == [(3, 0.625)]


def test_each_step_of_a_loop_takes_the_rate_of_its_own_update(tmp_path):
    """The worked example with --warmup_steps=3 (rates ½·⅓, ½·⅔, ½): w ← w − rate (w − 2): 0 → ⅓ → 8/9 → 13/9,
    in one run of 3 steps as in 3 runs of one (with the rate read once a run, all three would take ⅙: 91/108)."""
    recipe, data = scalar_recipe(half_mean_square, w0=0.0), scalar_dataset(1, 3)
    warm = {"warmup_steps": 3, "checkpoint_every": 0}
    looped = train(recipe, data, tmp_path / "looped", "sync", steps_per_run=3, log_every=3, **warm)
    stepped = train(recipe, data, tmp_path / "stepped", "sync", steps_per_run=1, **warm)
    assert float(looped["params"]["model/w:0"][0]) == pytest.approx(13 / 9, abs=1e-6)
    assert looped["summary"]["params_sha256"] == stepped["summary"]["params_sha256"]
    assert (looped["summary"]["session_runs"], stepped["summary"]["session_runs"]) == (1, 3)


@pytest.mark.parametrize(
    "flags",
    [
        {"num_workers": 1},
        {"num_workers": 2, "optimizer": "adam"},
        {"num_workers": 2, "strict_determinism": True, "microbatches": 8},
        {"num_workers": 2, "lr_schedule": "cosine", "warmup_steps": 10},
        {"num_workers": 2, "lr_schedule": "step", "lr_decay_milestones": (7, 12), "linear_scaling_batch": 60},
    ],
    ids=["1 worker", "2 workers, adam", "2 workers, strict", "cosine after warm-up", "step at milestones, scaled"],
)
def test_five_steps_a_run_train_what_one_step_a_run_trains(tmp_path, flags):
    looped = train(MLP, DIGITS, tmp_path / "looped", "sync", steps_per_run=5, **{**FLAGS, **flags})
    stepped = train(MLP, DIGITS, tmp_path / "stepped", "sync", steps_per_run=1, **{**FLAGS, **flags})
    assert looped["summary"]["params_sha256"] == stepped["summary"]["params_sha256"]
    assert [(m["step"], m["loss"]) for m in looped["metrics"]] == [(m["step"], m["loss"]) for m in stepped["metrics"]]
    per_step = ("bytes_sent_per_step", "bytes_received_per_step")  # the loop's crossings, counted once a step
    assert [looped["summary"][key] for key in per_step] == [stepped["summary"][key] for key in per_step]


def test_a_shorter_last_run_and_a_resume_end_on_the_uninterrupted_run(tmp_path):
    """30 steps at 7 a run (the last run trains 2), and 14 steps resumed to 30 at 7 a run."""
    loop = {**FLAGS, "steps_per_run": 7, "log_every": 7, "checkpoint_every": 0}
    ones = sha(tmp_path / "ones", "sync", steps_per_run=1)
    assert sha(tmp_path / "sevens", "sync", **loop) == ones
    train(MLP, DIGITS, tmp_path / "resumed", "sync", **{**loop, "train_steps": 14})
    assert sha(tmp_path / "resumed", "sync", **loop) == ones


@pytest.mark.parametrize(
    "flags",
    [
        {"num_workers": 1},
        {"num_workers": 2},
        {"num_workers": 4},
        {"num_workers": 2, "optimizer": "momentum", "warmup_steps": 10},
        {"num_workers": 2, "allreduce_bucket_mb": 0.005, "allreduce_transport": HALF},
        {"num_workers": 2, "strict_determinism": True, "microbatches": 4},
    ],
    ids=["1 worker", "2 workers", "4 workers", "momentum warming up", f"buckets in {HALF}", "strict"],
)
def test_all_reduce_s_collectives_inside_the_loop_train_what_one_step_a_run_trains(tmp_path, flags):
    """All-reduce at 10 steps a run: each step reads the copies the last one updated and runs its collectives
    inside the loop, in the order one step a run does, so 30 steps in 3 runs end on the 30 runs' bits, log
    the same losses, and count the same bytes a step."""
    loop = {**FLAGS, "log_every": 10, "checkpoint_every": 0, **flags}
    looped = train(MLP, DIGITS, tmp_path / "looped", "allreduce", steps_per_run=10, **loop)
    stepped = train(MLP, DIGITS, tmp_path / "stepped", "allreduce", steps_per_run=1, **loop)
    assert looped["summary"]["params_sha256"] == stepped["summary"]["params_sha256"]
    assert [(m["step"], m["loss"]) for m in looped["metrics"]] == [(m["step"], m["loss"]) for m in stepped["metrics"]]
    assert (looped["summary"]["session_runs"], stepped["summary"]["session_runs"]) == (3, 30)
    per_step = ("bytes_sent_per_step", "bytes_received_per_step")
    assert [looped["summary"][key] for key in per_step] == [stepped["summary"][key] for key in per_step]


def test_an_async_worker_alone_at_ten_steps_a_run_trains_the_one_process_run(tmp_path):
    """One async worker pushing and fetching every step is the one process (test_equalities); at 10 steps a
    run its loop pushes and prefetches as those runs do: the same bits and losses in 1 + 3 runs, not 31.
    Both build the one step the driver runs (its push, then the next step's fetch), so both read 31 copies in
    30 steps: the last step fetches too, whatever k."""
    loop = {**FLAGS, "log_every": 10, "checkpoint_every": 0}
    looped = train(MLP, DIGITS, tmp_path / "looped", "async", num_workers=1, steps_per_run=10, **loop)
    single = train(MLP, DIGITS, tmp_path / "single", "single", **loop)
    stepped = train(MLP, DIGITS, tmp_path / "stepped", "async", num_workers=1, steps_per_run=1, **loop)
    assert looped["summary"]["params_sha256"] == single["summary"]["params_sha256"]
    assert [(m["step"], m["loss"]) for m in looped["metrics"]] == [(m["step"], m["loss"]) for m in single["metrics"]]
    assert (looped["summary"]["session_runs"], stepped["summary"]["session_runs"]) == (4, 31)  # a fetch first
    assert looped["summary"]["updates_by_worker"] == [30]
    assert looped["summary"]["bytes_received_per_step"] == stepped["summary"]["bytes_received_per_step"]


def test_the_one_process_at_ten_steps_a_run_trains_what_one_step_a_run_trains(tmp_path):
    """The reference loops too, so a cluster's loop is compared with a reference that has one. Each step
    applies its update once every gradient is computed: an update racing the backprop that still reads the
    variable it writes gave another params_sha256 from run to run."""
    loop = {**FLAGS, "log_every": 10, "checkpoint_every": 0}
    looped = [sha(tmp_path / f"looped{repeat}", "single", steps_per_run=10, **loop) for repeat in range(2)]
    assert looped == [sha(tmp_path / "stepped", "single", steps_per_run=1, **loop)] * 2


def test_every_modes_loop_at_one_worker_trains_the_one_process_bits_with_adam_on_a_warm_cosine(tmp_path):
    """Adam's slots made inside the loop, and each step's rate read from the global step inside it: at one
    worker, sync, all-reduce and async at 10 steps a run, and the one process at 10, end on the one
    process's bits at one step a run."""
    loop = {**FLAGS, "log_every": 10, "checkpoint_every": 0, "optimizer": "adam", "lr_schedule": "cosine"}
    loop["warmup_steps"] = 5
    reference = sha(tmp_path / "stepped", "single", steps_per_run=1, **loop)
    looped = {"single": sha(tmp_path / "single", "single", steps_per_run=10, **loop)}
    for mode in ("sync", "allreduce", "async"):
        looped[mode] = sha(tmp_path / mode, mode, steps_per_run=10, num_workers=1, **loop)
    assert looped == dict.fromkeys(looped, reference)


def test_two_async_workers_in_loops_push_every_step_of_their_own(tmp_path):
    """Two workers, linear loss (gradient -x, whatever w), w0 = 1, α = ½, 3 steps in one run each: every
    step one worker pushes -1 (x = 1) and the other -3, in whatever order, so w = 1 + ½·(1 + 3)·3 = 7, as
    3 runs of a step each (test_arithmetic), and each worker made its 3 pushes."""
    recipe, data = scalar_recipe(linear, w0=1.0), scalar_dataset(1, 3)
    run = train(recipe, data, tmp_path, "async", steps_per_run=3, log_every=3, checkpoint_every=0)
    assert float(run["params"]["model/w:0"][0]) == 7.0
    assert run["summary"]["updates_by_worker"] == [3, 3]
    assert run["summary"]["session_runs"] == 2  # the chief's: its first fetch, then its 3 steps


def test_an_async_worker_resumed_in_loops_ends_on_the_uninterrupted_run(tmp_path):
    """14 steps at 7 a run, then resumed to 30: the resumed worker fetches first (its copy is not saved)."""
    loop = {**FLAGS, "num_workers": 1, "steps_per_run": 7, "log_every": 7, "checkpoint_every": 7}
    train(MLP, DIGITS, tmp_path / "resumed", "async", **{**loop, "train_steps": 14})
    assert sha(tmp_path / "resumed", "async", **loop) == sha(tmp_path / "single", "single")


TWO_WORKERS = cluster_lib.parse({"cluster": {"ps": ["a:1"], "worker": ["a:2", "a:3"]}}, "test")
DEFAULTS = run_flags.parse_run_args([])


@pytest.mark.parametrize(
    "given, line",
    [
        ({"aggregation": "accumulator"}, "--steps_per_run=5 needs --aggregation=ordered"),
        ({"replicas_to_aggregate": 1}, "--replicas_to_aggregate=1 does not go with --steps_per_run=5: the chief picks"),
        ({"log_every": 12}, "--log_every=12 is not a multiple of --steps_per_run=5: the trainer can only log"),
        ({"trace_steps": "10:12"}, "--trace_steps traces session runs, and with --steps_per_run=5 a run is 5 steps"),
        ({"mode": "async", "push_every": 2}, "--steps_per_run=5 needs --push_every=1, not --push_every=2: async's"),
        ({"mode": "async", "prefetch": False}, "--steps_per_run=5 needs --prefetch, not --noprefetch: async's loop"),
    ],
    ids=["accumulator", "backup workers", "log interval", "traced steps", "async pushing every 2", "async no prefetch"],
)
def test_what_a_loop_of_steps_cannot_hold_is_refused_with_one_line(given, line):
    values = {name: DEFAULTS[name].value for name in DEFAULTS}
    mode = given.pop("mode", "sync")
    values.update({"steps_per_run": 5, "log_every": 50, "checkpoint_every": 100, **given})
    with pytest.raises(ConfigError) as refused:
        run_check.check_run(mode, TWO_WORKERS, values, {"steps_per_run", *given})
    assert str(refused.value).startswith(line)


@pytest.mark.parametrize(
    "intervals, steps",
    [
        ({"log_every": 50, "checkpoint_every": 100}, 10),  # the defaults: gcd 50, of which 10 is the largest ≤ 10
        ({"log_every": 15, "checkpoint_every": 100}, 5),  # gcd 5
        ({"log_every": 12, "checkpoint_every": 0}, 6),  # 12: 6 divides it, 7 to 10 do not
        ({"log_every": 50, "checkpoint_every": 100, "eval_every": 4}, 2),  # gcd 2
        ({"log_every": 7, "snapshot_every": 21}, 7),
        ({"log_every": 1}, 1),
        ({}, 10),  # nothing to stop at
    ],
)
def test_the_automatic_steps_a_run_end_a_run_at_every_boundary(intervals, steps):
    assert steps_per_run.automatic(intervals) == steps


def _settings(mode="sync", **flags):
    """A chief's Settings of a 2-worker run, with `flags` given as a user gives them."""
    config = cluster_lib.parse({"cluster": {"worker": ["a:2", "a:3"]}}, "test") if mode == "allreduce" else TWO_WORKERS
    fields = dict(global_batch_size=120, train_steps=100, learning_rate=0.1, optimizer="sgd", seed=0, dataset="t")
    return run_settings(
        set(flags), mode=mode, job_name="worker", task_index=0, cluster=config, logdir=None, **fields, **flags
    )


def test_left_unset_the_steps_a_run_are_automatic_where_a_loop_composes_and_one_elsewhere():
    """Defaults (log every 50, checkpoint every 100): 10 in sync, all-reduce and async, a technique with a graph
    step on too; 1 where a loop does not compose (backup workers, the accumulator, traced steps, async's pushes
    every 2 steps), with the reason summary.json gives, or where 1 was given."""
    assert [_settings(mode).options.steps_per_run for mode in ("sync", "allreduce", "async")] == [10, 10, 10]
    assert "steps_per_run" in _settings().options_on
    assert _settings(log_every=15).options.steps_per_run == 5
    assert _settings(clip_norm=1.0).options.steps_per_run == 10
    assert _settings("async", max_staleness=0).options.steps_per_run == 10  # SSP's gates ride in the steps
    backup = _settings(replicas_to_aggregate=1)
    assert backup.options.steps_per_run == 1
    assert backup.one_step_a_run.startswith("--replicas_to_aggregate=1 does not go with --steps_per_run=10: the chief")
    assert _settings(aggregation="accumulator").options.steps_per_run == 1
    assert _settings(trace_steps=(10, 12)).options.steps_per_run == 1
    assert _settings(steps_per_run=1).options.steps_per_run == 1 and not _settings(steps_per_run=1).one_step_a_run
    assert _settings("async", push_every=2).options.steps_per_run == 1
    assert _settings("async", prefetch=False).options.steps_per_run == 1
    assert _settings("single").options.steps_per_run == 10  # the one process: the reference loops as the clusters do


@pytest.mark.parametrize("mode, steps", [("sync", 1), ("async", 10), ("allreduce", 10)])
def test_on_a_delayed_link_sync_runs_a_step_a_run_and_the_others_loop(mode, steps):
    """The automatic steps a run on a link of 10 ms one way: where the bench measured each faster (BENCHMARKS.md,
    "Latency"), a run of one step for sync, with why, the loop for async and all-reduce; a delay of 0 loops."""
    delayed = _settings(mode, link_rate="100mbit", link_delay=10.0)
    assert delayed.options.steps_per_run == steps
    assert delayed.one_step_a_run == (
        "--link_delay=10: on a delayed link a sync step inside a loop waits on one more one-way delay than a run of "
        "one step"
        if steps == 1
        else ""
    )
    assert _settings(mode, link_rate="100mbit", link_delay=0.0).options.steps_per_run == 10
    assert _settings(mode, link_rate="100mbit", link_delay=10.0, steps_per_run=5).options.steps_per_run == 5


TECHNIQUE_LOOPS = {  # (mode, workers, flags, an observable of the technique's that must move)
    "sync 8-bit codes, error feedback": ("sync", 2, {"gradient_compression": "8bit"}, "bytes_per_push"),
    "sync clipping": ("sync", 2, {"clip_norm": 0.5}, "clipped_updates"),
    "all-reduce PowerSGD, from step 15": ("allreduce", 2, {"powersgd_rank": 1, "powersgd_start_step": 15}, None),
    "all-reduce gathered QSGD codes": ("allreduce", 2, {"gradient_compression": "qsgd:4"}, "bytes_per_push"),
    f"all-reduce buckets in {HALF}": (
        "allreduce",
        2,
        {"allreduce_bucket_mb": 0.005, "allreduce_transport": HALF},
        "allreduce_buckets",
    ),
    "async staleness-aware": ("async", 1, {"staleness_aware": True}, "staleness_aware_pushes"),
    "async 1-softsync": ("async", 1, {"softsync": 1}, "softsync_pushes"),
    "async DC-ASGD": ("async", 1, {"delay_compensation": 0.04}, "compensated_pushes"),
    "async DC-ASGD-a": ("async", 1, {"adaptive_delay_compensation": 0.04}, "compensated_pushes"),
    "async SSP": ("async", 1, {"max_staleness": 0}, None),  # alone, its clock and gates: two, test_ssp_... below
}
# The chief's thread applies softsync's updates as pushes come, so whether a fetch sees the last one is timing's,
# at one step a run too (two runs of it end on two hashes): its loop is held to the counts, not the bits.
BITS_OF_TIMING = {"async 1-softsync"}


@pytest.mark.parametrize("case", TECHNIQUE_LOOPS)
def test_a_technique_in_the_default_loop_trains_what_one_step_a_run_trains(tmp_path, case):
    """Left to the automatic k, a run with a technique whose step is a graph trains 10 steps a session run
    (3 runs for 30 steps; PowerSGD's phases end a run at its start step: 0-9, 10-14, 15-19, 20-29; async's
    first fetch is a run of its own, and SSP's first gate before it) and ends on the bits, losses and counters
    of --steps_per_run=1 (softsync's: its counters, BITS_OF_TIMING)."""
    mode, workers, flags, observable = TECHNIQUE_LOOPS[case]
    loop = {**FLAGS, "log_every": 10, "checkpoint_every": 0, "num_workers": workers, **flags}
    looped = train(MLP, DIGITS, tmp_path / "looped", mode, **loop)
    stepped = train(MLP, DIGITS, tmp_path / "stepped", mode, steps_per_run=1, **loop)
    if case not in BITS_OF_TIMING:
        assert looped["summary"]["params_sha256"] == stepped["summary"]["params_sha256"]
        assert [(m["step"], m["loss"]) for m in looped["metrics"]] == [
            (m["step"], m["loss"]) for m in stepped["metrics"]
        ]
    before = (mode == "async") + ("max_staleness" in flags)  # async's first fetch, and SSP's first gate before it
    runs = {"sync": 3, "allreduce": 4 if "powersgd_rank" in flags else 3, "async": 3}[mode]
    assert (looped["summary"]["session_runs"], stepped["summary"]["session_runs"]) == (before + runs, before + 30)
    assert "one_step_a_run" not in looped["summary"]
    if observable:
        assert looped["summary"][observable] == stepped["summary"][observable]
        assert looped["summary"][observable]


def test_ssp_gates_each_step_of_two_workers_inside_the_loop_and_ends(tmp_path):
    """Two workers in lockstep (s = 0) at 10 steps a run: each step, once its push is sent, tells the other its
    clock and takes the other's token for the next step before its fetch, so neither starts a step ahead
    (largest_clock_gap 0) and both end. Every push lands, whatever their order."""
    flags = {**FLAGS, "log_every": 10, "checkpoint_every": 0, "num_workers": 2, "max_staleness": 0}
    summary = train(MLP, DIGITS, tmp_path, "async", **flags)["summary"]
    assert (summary["session_runs"], summary["largest_clock_gap"]) == (2 + 3, 0)  # the first gate, the first fetch
    assert summary["updates_by_worker"] == [30, 30] and summary["global_step"] == 60
