"""Learning-rate schedules, worked out by hand: the rate at each step, and the parameter it trains in
every mode that takes a schedule (the arithmetic of test_arithmetic.py: w ← w - rate_t (w - 2))."""

import math

import pytest
from inprocess import half_mean_square, scalar_dataset, scalar_recipe, train

from parallel_tf.compat import tf
from parallel_tf.graph.learning_rates import Schedule

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
