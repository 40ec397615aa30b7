"""Learning-rate schedules, worked out by hand: the rate at each step, and the parameter it trains in
every mode that takes a schedule (the arithmetic of test_arithmetic.py: w ← w - rate_t (w - 2))."""

import math
import re

import pytest
from inprocess import half_mean_square, joined_workers, linear, scalar_dataset, scalar_recipe, train

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.optimizers import Schedule
from parallel_tf.training import logdir, run_check, run_flags
from parallel_tf.training import settings as settings_lib

pytestmark = pytest.mark.inprocess


def rates(schedule, steps=6):
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        rate = schedule.at(step)
        with tf.Session() as sess:
            return [float(sess.run(rate, {step: s})) for s in range(steps)]


def test_warm_up_rises_linearly_to_the_rate():
    """base (s + 1) / W for s < W = 4, then base: 0.5 · ¼, ½, ¾, 1, 1, 1."""
    assert rates(Schedule(0.5, warmup_steps=4)) == [0.125, 0.25, 0.375, 0.5, 0.5, 0.5]


def test_step_decay_multiplies_by_the_rate_every_d_steps_counted_from_the_first():
    assert rates(Schedule(0.5, "step", decay_steps=2, decay_rate=0.5)) == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125]
    # warm-up over 2 steps (factors ½, 1) times the decay counted from step 0 (1, 1, ½, ½, ¼, ¼), as Goyal et
    # al.'s drops at epochs 30, 60, 80 count from epoch 0 while their warm-up takes epochs 0-4
    assert rates(Schedule(0.5, "step", warmup_steps=2, decay_steps=2, decay_rate=0.5)) == [
        0.25,
        0.5,
        0.25,
        0.25,
        0.125,
        0.125,
    ]


def test_step_decay_at_milestones():
    """Times ½ from step 2 and again from step 5: 0.5, 0.5, 0.25, 0.25, 0.25, 0.125."""
    assert rates(Schedule(0.5, "step", decay_rate=0.5, milestones=(2, 5))) == [0.5, 0.5, 0.25, 0.25, 0.25, 0.125]


def test_linear_scaling_warms_up_from_the_unscaled_rate_as_goyal_et_al():
    """η = 0.1, k = 128/4 = 32, W = 4: η + (kη − η)·s/W = 0.1, 0.875, 1.65, 2.425, then kη = 3.2 (the paper's
    gradual warm-up; from 0 it would be 0.8, 1.6, 2.4, 3.2)."""
    fields = dict(SINGLE, global_batch_size=128, linear_scaling_batch=4, warmup_steps=4)
    schedule = settings_lib.run_settings(**fields).schedule
    assert (schedule.base, schedule.warmup_from) == (pytest.approx(3.2), 0.1)
    assert rates(schedule) == pytest.approx([0.1, 0.875, 1.65, 2.425, 3.2, 3.2], abs=1e-6)


def test_an_async_schedule_counts_pushes_and_cosine_lasts_the_run_s_pushes():
    """Async's global step counts the updates applied: N·⌈T/n_push⌉ pushes (2 workers, 3 steps: 6), or
    with n-softsync one update per ⌊N/n⌋ pushes (1-softsync: 3). Cosine's default length is that, less
    warm-up, not the worker's steps (which would leave the last half of the pushes at rate 0)."""
    spec = {"cluster": {"ps": ["a:1"], "worker": ["a:3", "a:4"]}}
    fields = dict(SINGLE, mode="async", cluster=cluster_lib.parse(spec, "test"), train_steps=3, lr_schedule="cosine")
    assert settings_lib.run_settings(**fields).schedule.decay_steps == 6
    assert settings_lib.run_settings(**fields, warmup_steps=2).schedule.decay_steps == 4
    softsync = dict(fields, softsync=1)
    assert settings_lib.run_settings(**softsync).schedule.decay_steps == 3
    assert settings_lib.run_settings(**dict(fields, mode="sync")).schedule.decay_steps == 3


def test_async_pushes_are_applied_at_the_rate_of_the_push_count(tmp_path):
    """Two workers, gradient −2 whatever w (linear loss, x = 2 everywhere), α = ½, cosine over the run's 6
    pushes, applied one after another: the rates are ½·½(1 + cos(πs/6)) for s = 0..5, whose cosines sum to 1,
    so w = 1 + 2·½·½·(6 + 1) = 4.5. (Counted in worker steps, the last 3 pushes would be at rate 0.)"""
    workers = joined_workers(
        scalar_recipe(linear, w0=1.0), scalar_dataset(2, 2), tmp_path, "async", train_steps=3, lr_schedule="cosine"
    )
    for step in range(3):
        for worker, session in workers:  # one push at a time
            model = worker.train_graph.model
            for fetches in worker.train_graph.runs(step):
                session.run(fetches, {model.features: [[2.0]], model.labels: [2]})
    (chief, session), _ = workers
    assert float(session.run(chief.graph.get_tensor_by_name("model/w:0"))[0]) == pytest.approx(4.5, abs=1e-6)


def test_cosine_decay_falls_to_zero_over_d_steps_and_stays_there():
    """½ (1 + cos(π s / 4)): 1, (1 + √½)/2 = 0.853553, ½, (1 - √½)/2 = 0.146447, 0, 0."""
    half_root = math.sqrt(0.5)
    expected = [1.0, (1 + half_root) / 2, 0.5, (1 - half_root) / 2, 0.0, 0.0]
    assert rates(Schedule(1.0, "cosine", decay_steps=4)) == pytest.approx(expected, abs=1e-7)


def test_a_constant_rate_is_a_plain_number_so_the_graph_is_what_it_was():
    assert Schedule(0.1).at(tf.constant(3)) == 0.1


@pytest.mark.parametrize(
    "mode, num_workers, flags",
    [("single", 1, {}), ("sync", 1, {}), ("sync", 2, {}), ("async", 1, {"push_every": 1, "fetch_every": 1})],
)
def test_every_mode_applies_the_rate_of_the_step_an_update_is_applied_at(tmp_path, mode, num_workers, flags):
    """Step decay by ½ every step from 0.5: rates 0.5, 0.25, 0.125. w ← w - rate (w - 2):
    0 → 1 → 1.25 → 1.34375 (exact in float32). Async with one worker pushing and fetching every step
    applies each push at the step it was computed for, so it takes the same steps."""
    schedule = {"lr_schedule": "step", "lr_decay_steps": 1, "lr_decay_rate": 0.5}
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, mode, num_workers=num_workers, **schedule, **flags)
    assert float(run["params"]["model/w:0"][0]) == 1.34375


QUADRATIC = scalar_recipe(half_mean_square, w0=0.0)
ONE_AND_THREE = scalar_dataset(1, 3)
SINGLE = dict(mode="single", job_name="worker", task_index=0, cluster=None, global_batch_size=120, train_steps=100)
SINGLE.update(learning_rate=0.1, optimizer="sgd", seed=0, logdir=None, dataset="digits")


@pytest.mark.parametrize(
    "mode, given, refusal",
    [
        (
            "sync",
            {"local_steps": 4, "lr_schedule": "cosine"},
            "--local_steps=4 needs --lr_schedule=constant, not --lr_schedule=cosine: the copies take plain SGD steps",
        ),
        (
            "async",
            {"fetch_every": 3, "warmup_steps": 10},
            "--fetch_every=3 with --local_updates needs --warmup_steps=0, not --warmup_steps=10",
        ),
        (
            "async",
            {"linear_scaling_batch": 60},
            "--linear_scaling_batch does not apply to --mode=async; it is for --mode=sync|allreduce: the rule scales "
            "the rate with the batch an update averages",
        ),
        (
            "hierarchical",
            {"lr_schedule": "step", "lr_decay_steps": 2},
            "--lr_schedule does not apply to --mode=hierarchical; it is for --mode=sync|async|allreduce: hierarchical "
            "groups and the central ps count their steps apart",
        ),
    ],
)
def test_a_schedule_is_refused_where_no_one_step_defines_the_rate(mode, given, refusal):
    """Local SGD's and EASGD's copies, Downpour's local updates and hierarchical groups step at
    --learning_rate by their own counts: a schedule there would not be the schedule asked for. And the
    linear scaling rule's batch is an update's, the global batch only in lockstep."""
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        compose(mode, given)


def test_async_without_local_updates_takes_a_schedule():
    assert compose("async", {"fetch_every": 3, "local_updates": False, "lr_schedule": "cosine"}).names == ()


def compose(mode, given):
    spec = {"cluster": {"ps": ["a:1"], "local_ps": ["a:2"], "worker": ["a:3", "a:4"]}, "groups": [[0, 1]]}
    if mode != "hierarchical":
        spec = {"cluster": {"ps": ["a:1"], "worker": ["a:3", "a:4"]}}
    defaults = run_flags.parse_run_args([])
    values = {name: defaults[name].value for name in defaults}
    return run_check.check_run(mode, cluster_lib.parse(spec, "test"), {**values, **given}, set(given))


def test_run_json_records_the_schedule_so_a_resume_must_keep_it():
    """The schedule a run's flags settle is part of what a resume must match (logdir.run_identity), recorded
    for every run, so a run resumed without the schedule it had (or with one it had not) is refused. Cosine's
    D defaults to the steps after warm-up, so a resume that trains longer would change it, and is refused."""
    fields = SINGLE
    plain = logdir.run_identity("mnist", settings_lib.run_settings(**fields))
    assert plain["learning_rate_schedule"]["kind"] == "constant" and plain["lr_schedule"] == "constant"
    cosine = logdir.run_identity("mnist", settings_lib.run_settings(**fields, lr_schedule="cosine", warmup_steps=10))
    assert cosine["learning_rate_schedule"] == {
        "base": 0.1,
        "kind": "cosine",
        "warmup_steps": 10,
        "decay_steps": 90,
        "decay_rate": 0.1,
        "milestones": (),
        "warmup_from": None,
    }
    longer = dict(fields, train_steps=200)
    assert (
        logdir.run_identity("mnist", settings_lib.run_settings(**longer, lr_schedule="cosine", warmup_steps=10))
        != cosine
    )
    warm = [logdir.run_identity("mnist", settings_lib.run_settings(**f, warmup_steps=10)) for f in (fields, longer)]
    assert warm[0] == warm[1]  # warm-up then constant does not depend on --train_steps: a resume may train longer
