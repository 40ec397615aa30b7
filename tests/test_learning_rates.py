"""Learning-rate schedules, worked out by hand: the rate at each step, and the parameter it trains in
every mode that takes a schedule (the arithmetic of test_arithmetic.py: w ← w - rate_t (w - 2))."""

import math
import re

import pytest
from inprocess import half_mean_square, scalar_dataset, scalar_recipe, train

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.learning_rates import Schedule
from parallel_tf.training import logdir, task_flags

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


def test_step_decay_multiplies_by_the_rate_every_d_steps_after_warm_up():
    assert rates(Schedule(0.5, "step", decay_steps=2, decay_rate=0.5)) == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125]
    # warm-up over 2 steps (0.25, 0.5), then the decay counts from step 2: 0.5, 0.5, 0.25, 0.25
    assert rates(Schedule(0.5, "step", warmup_steps=2, decay_steps=2, decay_rate=0.5)) == [
        0.25,
        0.5,
        0.5,
        0.5,
        0.25,
        0.25,
    ]


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
            "--local_updates needs --warmup_steps=0, not --warmup_steps=10",
        ),
        (
            "hierarchical",
            {"lr_schedule": "step"},
            "--lr_schedule and --warmup_steps are not for --mode=hierarchical yet",
        ),
    ],
)
def test_a_schedule_is_refused_where_no_one_step_defines_the_rate(mode, given, refusal):
    """Local SGD's and EASGD's copies, Downpour's local updates and hierarchical groups step at
    --learning_rate by their own counts: a schedule there would not be the schedule asked for."""
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        compose(mode, given)


def test_async_without_local_updates_takes_a_schedule():
    assert compose("async", {"fetch_every": 3, "local_updates": False, "lr_schedule": "cosine"}).names == ()


def compose(mode, given):
    spec = {"cluster": {"ps": ["a:1"], "local_ps": ["a:2"], "worker": ["a:3", "a:4"]}, "groups": [[0, 1]]}
    if mode != "hierarchical":
        spec = {"cluster": {"ps": ["a:1"], "worker": ["a:3", "a:4"]}}
    defaults = task_flags.parse_run_args([])
    values = {name: defaults[name].value for name in defaults}
    return task_flags.check_run(mode, cluster_lib.parse(spec, "test"), {**values, **given}, set(given))


def test_run_json_records_a_schedule_so_a_resume_must_keep_it_and_older_runs_still_resume():
    """The schedule is part of what a resume must match (logdir.run_identity), recorded only when one is
    used: a run without one has the identity it always had. Cosine's D defaults to the steps after
    warm-up, so a resume that trains longer would change it, and is refused."""
    fields = dict(mode="single", job_name="worker", task_index=0, cluster=None, global_batch_size=120)
    fields.update(train_steps=100, learning_rate=0.1, optimizer="sgd", seed=0, logdir=None, dataset="digits")
    plain = logdir.run_identity("mnist", task_flags.run_settings(**fields))
    assert "learning_rate_schedule" not in plain
    cosine = logdir.run_identity("mnist", task_flags.run_settings(**fields, lr_schedule="cosine", warmup_steps=10))
    assert cosine["learning_rate_schedule"] == {
        "base": 0.1,
        "kind": "cosine",
        "warmup_steps": 10,
        "decay_steps": 90,
        "decay_rate": 0.1,
    }
    longer = dict(fields, train_steps=200)
    assert (
        logdir.run_identity("mnist", task_flags.run_settings(**longer, lr_schedule="cosine", warmup_steps=10)) != cosine
    )
    warm = [logdir.run_identity("mnist", task_flags.run_settings(**f, warmup_steps=10)) for f in (fields, longer)]
    assert warm[0] == warm[1]  # warm-up then constant does not depend on --train_steps: a resume may train longer
