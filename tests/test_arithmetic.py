"""Every mode and technique computes the numbers it should: exact parameter values worked out by hand,
in the style of TensorFlow's sync_replicas_optimizer_test.py, on in-process clusters (inprocess.py).

The model has one parameter w. Its 'logits' are x - w, so with the loss ½ mean (x - w)² a worker's
gradient is w - mean(x of its slice), and with the linear loss mean(x (x - w)) it is -mean(x),
whatever w is. The dataset is x = {1, 3} and the global batch is both examples, so each step one
worker of two sees 1 and the other 3 (in an order the shuffle decides), and their mean is 2.
Every value below is exact in float32.
"""

import threading
import time

import numpy as np
import pytest
from inprocess import half_mean_square, joined_workers, linear, scalar_dataset, scalar_recipe, slope, train

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.tools import drift
from parallel_tf.training.techniques import easgd, softsync

pytestmark = pytest.mark.inprocess

RUN_SECONDS = 10
ONE_AND_THREE = scalar_dataset(1, 3)
TWOS = scalar_dataset(2, 2, 2, 2, 2, 2)
QUADRATIC = scalar_recipe(half_mean_square, w0=0.0)
LINEAR = scalar_recipe(linear, w0=1.0)


def w(run):
    return float(run["params"]["model/w:0"][0])


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"strict_determinism": True, "microbatches": 2},
        {"aggregation": "accumulator"},
        {"pipeline_pieces": 2, "strict_determinism": True, "microbatches": 2},
    ],
    ids=["ordered", "strict", "accumulator", "pipelined"],
)
@pytest.mark.parametrize("num_workers", [1, 2])
def test_sync_takes_the_mean_gradient_of_the_global_batch_at_each_step(tmp_path, flags, num_workers):
    """w ← w - ½ (w - 2): 0 → 1 → 1.5 → 1.75. The loss logged at step t is that of w before the step,
    ½ ((1 - w)² + (3 - w)²) / 2: 2.5, 1, 0.625; the final loss is 0.53125, at w = 1.75."""
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "sync", num_workers=num_workers, **flags)
    assert w(run) == 1.75
    assert [(m["step"], m["loss"]) for m in run["metrics"]] == [(1, 2.5), (2, 1.0), (3, 0.625)]
    assert run["summary"]["final_loss"] == 0.53125


def test_the_one_process_reference_takes_the_same_steps(tmp_path):
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "single")
    assert w(run) == 1.75
    assert [m["loss"] for m in run["metrics"]] == [2.5, 1.0, 0.625]


def test_async_downpour_pushes_every_second_step_and_fetches_every_third(tmp_path):
    """One worker, push_every=2, fetch_every=3, --nolocal_updates, w ← w - ½ (sum of gradients since the last push):
    step 0: fetch w=0 → copy 0; g = 0 - 2 = -2, sum -2
    step 1: g = -2, sum -4; push: w = 0 + 2 = 2
    step 2: g = -2 (copy still 0), sum -2
    step 3: fetch → copy 2; g = 0, sum -2; push: w = 2 + 1 = 3
    step 4: g = 0; step 5: g = 0; push: w = 3.
    The logged loss is the worker's copy's: 2.5 for steps 1-3 (copy 0), 0.5 for steps 4-6 (copy 2);
    the final loss is evaluated at w = 3: ½ (4 + 0) / 2 = 1."""
    downpour = {"push_every": 2, "fetch_every": 3, "train_steps": 6}
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "async", num_workers=1, local_updates=False, **downpour)
    assert w(run) == 3.0
    assert [m["loss"] for m in run["metrics"]] == [2.5, 2.5, 2.5, 0.5, 0.5, 0.5]
    assert run["summary"]["updates_by_worker"] == [3]
    assert run["summary"]["final_loss"] == 1.0


def test_downpour_local_updates_move_the_copy_by_each_gradient_between_fetches(tmp_path):
    """As above, with local updates (the default): the copy c also takes c ← c - ½ g after every step.
    step 0: fetch c = 0; g = -2, sum -2; c = 1
    step 1: g = -1, sum -3; push: w = 0 + 1.5 = 1.5; c = 1.5
    step 2: g = -0.5, sum -0.5; c = 1.75
    step 3: fetch c = 1.5; g = -0.5, sum -1; push: w = 2; c = 1.75
    step 4: g = -0.25, sum -0.25; c = 1.875
    step 5: g = -0.125, sum -0.375; push: w = 2.1875.
    The loss logged is the copy's before the step, ((1 - c)² + (3 - c)²) / 4; the final loss is at w."""
    downpour = {"push_every": 2, "fetch_every": 3, "train_steps": 6}
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "async", num_workers=1, **downpour)
    assert w(run) == 2.1875
    assert [m["loss"] for m in run["metrics"]] == [2.5, 1.0, 0.625, 0.625, 0.53125, 0.5078125]
    assert run["summary"]["local_updates"] is True
    assert run["summary"]["final_loss"] == 0.517578125


@pytest.mark.parametrize("staleness_aware, expected_w", [(False, 0.7), (True, 0.75)], ids=["plain", "staleness-aware"])
def test_a_push_of_staleness_2_is_applied_at_half_the_rate_when_staleness_aware(tmp_path, staleness_aware, expected_w):
    """Zhang et al.'s example: loss w - mean(x) (gradient 1), w0 = 1, α = 0.1, pushing and fetching every
    step, in a scripted order: A (worker 1) fetches; B (worker 0) fetches and pushes, twice, each with
    staleness σ = 0 (w: 0.9, 0.8); then A pushes with σ = 2 (two updates since its fetch):
    w = 0.8 - 0.1 / 2 = 0.75 staleness-aware, 0.8 - 0.1 = 0.7 plain. Staleness: 0 twice, 2 once."""
    workers = joined_workers(
        scalar_recipe(slope, w0=1.0),
        ONE_AND_THREE,
        tmp_path,
        "async",
        learning_rate=0.1,
        staleness_aware=staleness_aware,
    )
    (b, b_session), (a, a_session) = workers
    parts = {worker: dict(zip_strict(("fetch", "push"), worker.train_graph.runs(0))) for worker in (a, b)}

    def run(worker, session, part):  # a push also refetches (--prefetch), which this order does not see
        model = worker.train_graph.model
        session.run(parts[worker][part], {model.features: [[1.0]], model.labels: [1]})

    run(a, a_session, "fetch")
    for _ in range(2):
        run(b, b_session, "fetch")
        run(b, b_session, "push")
    run(a, a_session, "push")
    assert float(b_session.run(b.graph.get_tensor_by_name("model/w:0"))[0]) == pytest.approx(expected_w, abs=1e-6)
    assert b_session.run(b.train_graph.counters["staleness_histogram"]).tolist() == [[0, 2], [2, 1]]


@pytest.mark.parametrize("prefetch, histogram", [(True, [[0, 2], [1, 1]]), (False, [[0, 3]])])
def test_a_prefetching_worker_reads_when_its_push_is_applied_not_when_its_next_step_starts(
    tmp_path, prefetch, histogram
):
    """Two workers, gradient 1, w0 = 1, α = 0.1, in a scripted order of whole steps: B's step 0 (fetch,
    push), A's step 0 (fetch, push), B's step 1. With --prefetch, B's step 0 ends by reading w = 0.9 at
    global step 1, before A's push, so its step 1 pushes with σ = 2 - 1 = 1 and is one run; with
    --noprefetch, B's step 1 first fetches w = 0.8 at global step 2: σ = 0. A's push has σ = 0 either way
    (it fetched after B's), and w = 1 - 3·0.1 = 0.7 either way."""
    workers = joined_workers(
        scalar_recipe(slope, w0=1.0), ONE_AND_THREE, tmp_path, "async", learning_rate=0.1, prefetch=prefetch
    )
    (b, b_session), (a, a_session) = workers

    def step(worker, session, index):
        runs = worker.train_graph.runs(index)
        for fetches in runs:
            session.run(fetches, {worker.train_graph.model.features: [[1.0]], worker.train_graph.model.labels: [1]})
        return len(runs)

    assert (step(b, b_session, 0), step(a, a_session, 0)) == (2, 2)
    assert step(b, b_session, 1) == (1 if prefetch else 2)
    assert float(b_session.run(b.graph.get_tensor_by_name("model/w:0"))[0]) == pytest.approx(0.7, abs=1e-6)
    assert b_session.run(b.train_graph.counters["staleness_histogram"]).tolist() == histogram


@pytest.mark.parametrize(
    "local_updates, expected_w, histogram",
    [(True, 0.7, [[0, 3]]), (False, 0.75, [[0, 1], [1, 1], [2, 1]])],
    ids=["local updates", "nolocal_updates"],
)
def test_staleness_counts_only_the_updates_a_workers_copy_is_missing(tmp_path, local_updates, expected_w, histogram):
    """One worker, loss w - mean(x) (gradient 1), w0 = 1, α = 0.1, staleness-aware, fetching before step 0
    only (--fetch_every=3) and pushing every step, 3 steps. With local updates its copy takes each of its
    own pushes (1, 0.9, 0.8), so none is stale: σ = 0, 0, 0 and w = 1 - 3·0.1 = 0.7, Zhang et al.'s σ.
    Without, the copy stays at the fetched 1 while its pushes move w: σ = 0, 1, 2 and
    w = 1 - 0.1 - 0.1/1 - 0.1/2 = 0.75."""
    flags = {"learning_rate": 0.1, "staleness_aware": True, "fetch_every": 3, "local_updates": local_updates}
    run = train(scalar_recipe(slope, w0=1.0), ONE_AND_THREE, tmp_path, "async", num_workers=1, **flags)
    assert w(run) == pytest.approx(expected_w, abs=1e-6)
    assert run["summary"]["staleness_histogram"] == histogram
    assert run["summary"]["staleness_aware_pushes"] == 3


@pytest.mark.parametrize(
    "flags, expected_w",
    [
        ({"delay_compensation": 0.0}, 0.7),
        ({"delay_compensation": 1.0}, 0.72),
        ({"adaptive_delay_compensation": 0.5}, 0.7 + 0.02 * 5**0.5),
    ],
    ids=["plain", "lambda=1", "adaptive lambda0=0.5"],
)
def test_delay_compensation_corrects_a_gradient_for_the_drift_since_its_fetch(tmp_path, flags, expected_w):
    """Zheng et al.'s rule with f = ½ w² (x = 0), η = 0.1: the worker fetches w_bak = 1, then w moves to 0.8
    (as others' pushes would move it); its gradient, taken at 1, is 1, and is applied as
    1 + λ·1·1·(0.8 - 1) = 1 - 0.2λ: w = 0.8 - 0.08 = 0.72 with λ = 1, 0.8 - 0.1 = 0.7 plain.
    DC-ASGD-a first takes the gradient into MeanSquare = 0.95·0 + 0.05·1² = 0.05, then sets
    λ = 0.5/√0.05 = √5: w = 0.8 - 0.1(1 - 0.2√5) = 0.7 + 0.02√5 ≈ 0.74472 (ε = 1e-7 moves it by < 1e-6)."""
    flags = {"learning_rate": 0.1, **flags}
    ((worker, session),) = joined_workers(
        scalar_recipe(half_mean_square, w0=1.0), scalar_dataset(0), tmp_path, "async", num_workers=1, **flags
    )
    fetch, step_and_push = worker.train_graph.runs(0)
    (w_on_ps,) = worker.graph.get_collection("trainable_variables")
    session.run(fetch)
    w_on_ps.load([0.8], session)
    model = worker.train_graph.model
    session.run(step_and_push, {model.features: [[0.0]], model.labels: [0]})
    assert float(session.run(w_on_ps)[0]) == pytest.approx(expected_w, abs=1e-6)


@pytest.mark.parametrize(
    "flags",
    [{}, {"aggregation": "accumulator"}, {"strict_determinism": True, "microbatches": 2}],
    ids=["ordered", "accumulator", "strict"],
)
@pytest.mark.parametrize("num_workers", [1, 2])
def test_sync_clipping_clips_the_mean_gradient_of_each_step(tmp_path, flags, num_workers):
    """The run of test_sync_takes_the_mean_gradient... with --clip_norm=1: the mean gradient w - 2 is
    scaled to norm at most 1. w: 0 → (g = -2, clipped to -1) 0.5 → (g = -1.5 → -1) 1 → (g = -1, at the
    threshold, kept) 1.5, whatever the worker count; 2 of the 3 updates were clipped."""
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "sync", num_workers=num_workers, clip_norm=1.0, **flags)
    assert w(run) == 1.5
    assert run["summary"]["clipped_updates"] == 2


def test_async_clipping_clips_each_push(tmp_path):
    """Two workers, linear loss (gradient -x), w0 = 1, α = ½, --clip_norm=2, 3 steps: each step one worker
    pushes -1 (x = 1) and the other -3, clipped to -2: w = 1 + ½·(1 + 2)·3 = 5.5 (plain async: 7);
    3 of the 6 pushes were clipped."""
    run = train(LINEAR, ONE_AND_THREE, tmp_path, "async", clip_norm=2.0)
    assert w(run) == 5.5
    assert run["summary"]["clipped_updates"] == 3


@pytest.mark.parametrize("n, expected_w", [(1, 4.0), (2, 7.0)], ids=["1-softsync", "2-softsync"])
def test_softsync_applies_the_mean_of_every_floor_n_over_N_pushes(tmp_path, n, expected_w):
    """Two workers, linear loss, 3 steps, pushing every step: 6 pushes whose x sum to 3·(1 + 3) = 12.
    1-softsync averages them two at a time: 3 updates adding ½·(their x)/2 each, w = 1 + ½·12/2 = 4.
    2-softsync applies each push alone, as plain async does: w = 1 + ½·12 = 7."""
    run = train(LINEAR, ONE_AND_THREE, tmp_path, "async", softsync=n)
    assert w(run) == expected_w
    assert run["summary"]["updates_by_worker"] == [3, 3]


def test_a_softsync_push_waits_while_a_whole_update_awaits_the_chief(tmp_path):
    """2-softsync on 2 workers: c = ⌊2/2⌋ = 1, so the queue holds one push. Worker 1 pushes x = 3 and fills
    it; worker 0's push waits until the chief has applied that one (linear loss, gradient −x, α = ½:
    w = 1 + ½·3 = 2.5), then goes in. Unbounded, pushes piled up behind a slow chief, each computed on
    parameters missing all of them."""
    (chief, chief_session), (other, other_session) = joined_workers(
        LINEAR, ONE_AND_THREE, tmp_path, "async", softsync=2
    )

    def push(worker, session, x):
        model = worker.train_graph.model
        for fetches in worker.train_graph.runs(0):
            session.run(fetches, {model.features: [[x]], model.labels: [int(x)]})

    push(other, other_session, 3.0)
    pushing = threading.Thread(target=push, args=(chief, chief_session, 1.0))
    pushing.start()
    pushing.join(0.5)
    assert pushing.is_alive()  # waiting for room in the queue
    apply_next_update = chief.train_graph.background.args[0]  # what the chief's background thread runs
    chief_session.run(apply_next_update)
    pushing.join(RUN_SECONDS)
    assert not pushing.is_alive()
    assert float(chief_session.run(chief.graph.get_tensor_by_name("model/w:0"))[0]) == 2.5


def test_softsync_applies_the_pushes_left_over_at_the_end(tmp_path):
    """Five workers, 2-softsync: c = ⌊5/2⌋ = 2; one step, so 5 pushes of gradient -2 (x = 2 everywhere):
    updates of 2, 2 and the last 1 left over, each adding ½·2: w = 1 + 3 = 4 (plain async: 6; dropping
    the one left over: 3)."""
    run = train(LINEAR, scalar_dataset(2, 2, 2, 2, 2), tmp_path, "async", num_workers=5, softsync=2, train_steps=1)
    assert w(run) == 4.0


def test_a_softsync_push_reads_a_count_of_its_own_so_one_push_closes_the_queue():
    """The push whose count is the run's last closes the queue, and a second close fails its worker, so no two pushes
    may read the same count. 4 threads count 500 pushes each at once, as softsync counts them: every count from 1 to
    2000 read once. (assign_add's own value, read after its add, gave 1946 of 8000 counts to two or more pushes.)"""
    with tf.Graph().as_default():
        made = tf.get_variable("made", [], tf.int64, tf.zeros_initializer(), use_resource=True)
        count = softsync._push_counter(made)()
        with tf.Session() as session:
            session.run(made.initializer)
            counts = []
            threads = [
                threading.Thread(target=lambda: counts.extend(session.run(count) for _ in range(500))) for _ in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(RUN_SECONDS)
    assert sorted(counts) == list(range(1, 2001))


@pytest.mark.parametrize("s", [0, 1, 3])
def test_bounded_staleness_holds_the_fastest_worker_s_steps_ahead_of_a_straggler(tmp_path, s):
    """Three workers, worker 1 pausing 40 ms before each of its 12 steps, the others not: the others run
    ahead until they are s steps ahead of it and wait there, so the largest clock gap is exactly s. The
    arithmetic is plain async's: every push adds ½·2 to w, so w = 1 + 3·12 = 37."""
    flags = {"max_staleness": s, "worker_delay_ms": "1:40", "train_steps": 12}
    run = train(LINEAR, scalar_dataset(2, 2, 2), tmp_path, "async", num_workers=3, **flags)
    assert run["summary"]["largest_clock_gap"] == s
    assert w(run) == 37.0


def test_async_workers_push_every_gradient_exactly_once(tmp_path):
    """Two workers, linear loss, 5 steps, push_every=2 (pushes after steps 1, 3 and the last, 4): each
    step adds ½ (1 + 3) = 2 to w, in whatever order the pushes land, so w = 1 + 5·2 = 11."""
    run = train(LINEAR, ONE_AND_THREE, tmp_path, "async", push_every=2, fetch_every=2, train_steps=5)
    assert w(run) == 11.0
    assert run["summary"]["updates_by_worker"] == [3, 3]
    assert sum(count for _, count in run["summary"]["staleness_histogram"]) == 6  # every push, by staleness
    # TensorBoard gets the staleness histogram metrics.jsonl logs, as a histogram
    (events,) = tmp_path.glob("events.out.tfevents.*")
    values = [value for event in tf.train.summary_iterator(str(events)) for value in event.summary.value]
    histograms = [value.histo for value in values if value.tag == "staleness"]
    assert histograms[-1].num == sum(count for _, count in run["metrics"][-1]["staleness_histogram"])


def test_hierarchical_single_group_is_sync_whatever_central_every(tmp_path):
    """One group of both workers: the group steps are sync's (0 → 1 → 1.5 → 1.75); the central ps gets
    the group's summed update after step 1 (1.5) and after the last step (1.75), and is the result."""
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "hierarchical", groups=[[0, 1]], central_every=2)
    assert w(run) == 1.75
    assert [m["loss"] for m in run["metrics"]] == [2.5, 1.0, 0.625]
    assert run["summary"]["central_exchanges_by_group"] == [2]


def test_hierarchical_groups_each_send_every_update_to_the_central_ps_once(tmp_path):
    """Two groups of one worker, linear loss, 4 steps, central_every=3 (exchanges after steps 2 and 3):
    each step the groups add ½·1 and ½·3 to w, so central w = 1 + 4·2 = 9."""
    run = train(LINEAR, ONE_AND_THREE, tmp_path, "hierarchical", groups=[[0], [1]], central_every=3, train_steps=4)
    assert w(run) == 9.0
    assert run["summary"]["central_exchanges_by_group"] == [2, 2]


@pytest.mark.parametrize(
    "replicas, num_workers, missing",
    [(1, 2, ()), (2, 3, ()), (1, 2, (1,))],
    ids=["1 of 2", "2 of 3", "1 of 2, worker 1 dead"],
)
def test_backup_workers_apply_each_step_once_from_gradients_at_that_step(tmp_path, replicas, num_workers, missing):
    """Every worker sees x = 2, so every gradient computed at w_t is w_t - 2, and so is the mean of any R
    of them: w ← w - ½ (w - 2), 0 → 1 → 1.5 → 1.75 → 1.875 after 4 steps, whichever R arrive first.
    A step applied twice, or a gradient computed at an older w (stale) that was applied anyway, would move
    w elsewhere (w_1's gradient applied at step 2 gives 2, not 1.75). A worker that never comes holds
    nothing up. Each step applies exactly R gradients, at most one of each worker."""
    run = train(
        QUADRATIC,
        TWOS,
        tmp_path,
        "sync",
        num_workers=num_workers,
        missing=missing,
        replicas_to_aggregate=replicas,
        train_steps=4,
    )
    assert w(run) == 1.875
    summary = run["summary"]
    assert summary["replicas_to_aggregate"] == replicas
    assert summary["gradients_applied"] == replicas * 4
    assert max(summary["gradients_applied_by_worker"]) <= 4


def test_backup_workers_take_the_first_r_gradients_of_r_distinct_workers(tmp_path):
    """Chen et al.'s rule, R = 2 of N = 3, worker 2 never starting; ½ (x − w)², α = ½, w0 = 0, x = 1, 3, 5.
    Seed 0's epoch orders give workers 0 and 1 the x of (1, 5), (3, 5), (5, 1), (1, 3) in steps 0-3, so
    each step applies the mean of those two gradients: w = 0 → 1.5 → 2.75 → 2.875 → 2.4375. Applying one
    worker's gradient twice (a fast worker taking the dead one's turn) would make step 0's x mean 1 or 5."""
    run = train(
        QUADRATIC,
        scalar_dataset(1, 3, 5),
        tmp_path,
        "sync",
        num_workers=3,
        missing=(2,),
        replicas_to_aggregate=2,
        train_steps=4,
    )
    assert w(run) == 2.4375
    assert run["summary"]["gradients_applied_by_worker"] == [4, 4, 0]


def test_a_straggler_pauses_before_each_of_its_steps_and_sync_trains_the_same(tmp_path, monkeypatch):
    """--worker_delay_ms=1:40: worker 1 sleeps 0.04 s before each of its 3 steps, worker 0 never; sync waits
    for it, so w is sync's 1.75 (0 → 1 → 1.5 → 1.75)."""
    real_sleep, pauses = time.sleep, []

    def sleep(seconds):
        pauses.append((threading.current_thread().name, seconds))
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "sync", worker_delay_ms="1:40")
    assert w(run) == 1.75
    assert [name for name, seconds in pauses if seconds == 0.04] == ["worker:1"] * 3
    assert run["summary"]["worker_delay_ms"] == "1:40"


def test_local_sgd_averages_the_copies_after_h_local_steps(tmp_path):
    """--local_steps=2, x = {0, 2}, w0 = 0, ½ (x - w)², rate ½, two steps, so one average. Whichever
    worker sees which x at each step, the copies end where their mean is 0.75:
    the same x twice: 0 → 0 → 0 and 0 → 1 → 1.5; swapped: 0 → 0 → 1 and 0 → 1 → 0.5."""
    run = train(QUADRATIC, scalar_dataset(0, 2), tmp_path, "sync", local_steps=2, train_steps=2)
    assert w(run) == 0.75
    assert run["summary"]["train_steps"] == 2


def test_local_sgd_with_gradients_that_do_not_depend_on_w_is_sync(tmp_path):
    """With the linear loss each gradient is -x whatever the copy is, so H local steps then the mean of
    the copies move w as far as H sync steps: 1 + ½ · 2 · 3 = 4 after 3 steps, both ways (exact)."""
    local = train(LINEAR, ONE_AND_THREE, tmp_path / "local", "sync", local_steps=3)
    sync = train(LINEAR, ONE_AND_THREE, tmp_path / "sync", "sync")
    assert w(local) == w(sync) == 4.0


def test_elastic_exchanges_halve_the_gap_and_keep_the_sum():
    """EASGD with zero gradients, x = 1, x̃ = 0, α = 0.25: each exchange moves both by d = ¼ (x - x̃),
    so x - x̃ = 0.5^k after k exchanges and x + x̃ = 1 exactly."""
    with tf.Graph().as_default():
        x, centre = tf.Variable([1.0]), tf.Variable([0.0])
        exchange = easgd.elastic_exchange([x], [centre], 0.25)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for k in range(1, 6):
                sess.run(exchange)
                copy, middle = sess.run([x, centre])
                assert (copy - middle)[0] == 0.5**k and (copy + middle)[0] == 1.0


@pytest.mark.parametrize(
    "mode, num_workers, centre",
    [("async", 1, -0.625), ("sync", 1, -0.625), ("sync", 2, -1.125)],
)
def test_easgd_workers_step_their_copies_and_pull_the_centre_every_period(tmp_path, mode, num_workers, centre):
    """Gradient 1 (slope) for every worker, rate ½, α = ¼, τ = 2, w0 = 0; x̃ is the centre.
    One worker (async and sync alike): steps 1-2: x = -0.5, -1; exchange d = ¼ (-1 - 0): x̃ = -0.25,
    x = -0.75; steps 3-4: x = -1.25, -1.75; exchange d = ¼ (-1.75 + 0.25) = -0.375: x̃ = -0.625.
    Two workers, sync (their copies stay equal): x = -1 at the first exchange, x̃ = 0 + ¼ (-1 - 1) = -0.5
    and x = -0.75; then x = -1.75, x̃ = -0.5 + ¼ · 2 · (-1.75 + 0.5) = -1.125. The centre is what is
    evaluated and saved."""
    recipe = scalar_recipe(slope, w0=0.0)
    flags = {"easgd_alpha": 0.25, "easgd_period": 2, "train_steps": 4}
    run = train(recipe, ONE_AND_THREE, tmp_path, mode, num_workers=num_workers, **flags)
    assert w(run) == centre
    if mode == "async":
        assert run["summary"]["exchanges_by_worker"] == [2]


DIVERGING = {"learning_rate": 1e10, "train_steps": 6}


def test_a_diverging_run_without_the_guard_says_so_once_and_finishes(tmp_path, caplog):
    """One process, gradient 1 at rate 1e38: w = 0, -1e38, -2e38, ... The loss w - mean(x) over the
    batch {1, 3} sums before it divides: 2w - 4 overflows float32 (max 3.4e38) at w = -2e38, so the
    loss logged at step 3 is -inf; with --nonan_guard the run says so once and goes on."""
    run = train(
        scalar_recipe(slope, w0=0.0),
        ONE_AND_THREE,
        tmp_path,
        "single",
        learning_rate=1e38,
        train_steps=6,
        nan_guard=False,
    )
    assert [m["loss"] for m in run["metrics"]][2:] == [float("-inf")] * 4
    warnings = [r.getMessage() for r in caplog.records if "training has diverged" in r.getMessage()]
    assert warnings == ["the loss is -inf at step 3: training has diverged (a smaller --learning_rate may help)"]


@pytest.mark.parametrize("mode, num_workers", [("single", 1), ("sync", 2)])
def test_the_nan_guard_stops_at_the_first_infinite_loss_and_keeps_the_last_finite_checkpoint(
    tmp_path, mode, num_workers
):
    """½ (x − w)² at rate 1e10, checkpointing every step: w ← w − 1e10 (w − 2) gives w = 2e10, then
    2e10 − 1e10 (2e10 − 2) ≈ −2e20, both finite and checkpointed; the loss at step 3 is ½ (2e20)² = 2e40,
    beyond float32 (3.4e38): inf, on every worker's example. The run stops there, each worker naming the
    step, before writing anything of it: the latest checkpoint is step 2's."""
    with pytest.raises(AssertionError) as failed:
        train(QUADRATIC, ONE_AND_THREE, tmp_path, mode, num_workers=num_workers, checkpoint_every=1, **DIVERGING)
    stopped = "the loss is inf at step 3: training diverged, so --nan_guard stopped it"
    assert str(failed.value).count(stopped) == num_workers
    assert f"{stopped}; the last checkpoint, model.ckpt-2, is kept" in str(failed.value)
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest.endswith("model.ckpt-2")
    assert tf.train.load_variable(latest, "model/w") == pytest.approx([-2e20], rel=1e-6)
    assert not (tmp_path / "summary.json").exists()


def test_held_out_evaluation_reads_the_parameters_not_the_workers_copy(tmp_path):
    """Downpour as above (no local updates), with --eval_every=2: w is 2 after step 2 and 3 after step 4,
    while the worker's copy is still 0 at step 2. The held-out split is x = {1, 3} again, so eval_loss is
    ((1 - w)² + (3 - w)²) / 4 at the parameters: 0.5 at step 2 (the copy's loss would be 2.5), then 1.0
    at steps 4 and 6. Evaluating changes nothing trained: w and the logged losses are as without it."""
    downpour = {"push_every": 2, "fetch_every": 3, "train_steps": 6, "eval_every": 2}
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "async", num_workers=1, local_updates=False, **downpour)
    assert w(run) == 3.0
    assert [m["loss"] for m in run["metrics"]] == [2.5, 2.5, 2.5, 0.5, 0.5, 0.5]
    held_out = [(m["step"], m["eval_loss"]) for m in run["metrics"] if "eval_loss" in m]
    assert held_out == [(2, 0.5), (4, 1.0), (6, 1.0)]


def test_held_out_evaluation_adds_its_steps_to_the_log(tmp_path):
    """Sync, w: 0 → 1 → 1.5 → 1.75, logged every 2 steps and evaluated every 3: lines at step 2 (the
    batch loss before that step, 1.0) and step 3 (0.625, and eval_loss at w = 1.75: 0.53125)."""
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "sync", train_steps=3, log_every=2, eval_every=3)
    assert w(run) == 1.75
    lines = [{k: m[k] for k in ("step", "loss", "eval_loss") if k in m} for m in run["metrics"]]
    assert lines == [{"step": 2, "loss": 1.0}, {"step": 3, "loss": 0.625, "eval_loss": 0.53125}]


def test_snapshots_hold_the_parameters_of_each_step_and_a_one_worker_cluster_never_drifts(tmp_path):
    """--snapshot_every=1 on the sync example: w is 1, 1.5 and 1.75 after steps 1, 2 and 3, in the
    cluster and in the one process alike, so the drift between them is 0 at every step."""
    cluster = train(QUADRATIC, ONE_AND_THREE, tmp_path / "cluster", "sync", num_workers=1, snapshot_every=1)
    single = train(QUADRATIC, ONE_AND_THREE, tmp_path / "single", "single", snapshot_every=1)
    for run, logdir in ((cluster, tmp_path / "cluster"), (single, tmp_path / "single")):
        snapshots = [np.load(logdir / "params_at" / f"{step}.npz")["model/w:0"][0] for step in (1, 2, 3)]
        assert snapshots == [1.0, 1.5, 1.75] and w(run) == 1.75
    assert drift.distances(str(tmp_path / "cluster"), str(tmp_path / "single")) == [(1, 0.0), (2, 0.0), (3, 0.0)]
