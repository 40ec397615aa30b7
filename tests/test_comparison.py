"""A study's verdicts, worked out by hand: Welch's interval, its word, the repeats a difference needs,
and the time to a target."""

import math

import pytest

from parallel_tf.tools.comparison import difference, time_to_target

T_4 = 2.7764451051977934  # t quantile 0.975 at 4 degrees of freedom (tables: 2.776)


def test_a_clear_difference_is_worse_for_a_loss_and_better_for_an_accuracy():
    """{1, 2, 3} against {4, 5, 6}: difference 3; each side's variance 1, so the standard error is
    √(1/3 + 1/3) and Welch's degrees of freedom (2/3)² / (2 · (1/3)² / 2) = 4: 3 ± 2.776 · 0.8165."""
    loss = difference([1, 2, 3], [4, 5, 6])
    half = T_4 * math.sqrt(2 / 3)
    assert loss.mean == 3 and loss.low == pytest.approx(3 - half) and loss.high == pytest.approx(3 + half)
    assert loss.verdict == "worse"
    assert difference([1, 2, 3], [4, 5, 6], lower_is_better=False).verdict == "better"


def test_the_repeats_a_difference_needs_at_80_percent_power():
    """The same spreads (variance 1 a side): n repeats a side find a difference d at 80% power once
    (t(0.975) + t(0.80)) · √(2/n) ≤ d, t of 2n − 2 d.f. For d = 3: n = 3 gives (2.7764 + 0.9410) · 0.8165
    = 3.035 > 3, n = 4 gives (2.4469 + 0.9057) · 0.7071 = 2.371, so 4 (the interval alone excludes 0 at 3,
    which finds it half the time). For d = 0.5: (1.9793 + 0.8445) · √(2/63) = 0.5031, (1.9790 + 0.8445) ·
    √(2/64) = 0.4991, so 64; and d = 1, one standard deviation, 17 (0.9912; 16 gives 1.0239)."""
    assert difference([1, 2, 3], [4, 5, 6]).repeats_needed == 4
    small = difference([1, 2, 3], [1.5, 2.5, 3.5])
    assert small.verdict == "no measurable difference" and small.low < 0 < small.high
    assert small.repeats_needed == 64
    assert difference([1, 2, 3], [2, 3, 4]).repeats_needed == 17


def test_one_repeat_is_not_measured_and_equal_runs_differ_by_nothing():
    assert difference([1.0], [2.0]).verdict == "not measured (needs 2 repeats of each)"
    bitwise = difference([0.5, 0.5], [0.5, 0.5])
    assert (bitwise.mean, bitwise.low, bitwise.high, bitwise.verdict) == (0, 0, 0, "no measurable difference")
    assert bitwise.repeats_needed is None
    assert difference([0.5, 0.5], [0.25, 0.25]).verdict == "better"  # no spread: the interval is the point


def test_time_to_target_is_the_first_evaluation_that_reached_it():
    evaluations = [(50, 1.0, 0.9, 0.70), (100, 2.0, 0.4, 0.93), (150, 3.0, 0.3, 0.96), (200, 4.0, 0.35, 0.97)]
    assert time_to_target(evaluations, target_accuracy=0.95) == (150, 3.0)
    assert time_to_target(evaluations, target_loss=0.4) == (100, 2.0)
    assert time_to_target(evaluations, target_accuracy=0.99) is None


def test_repeats_paired_by_seed_leave_out_how_much_the_seeds_differ():
    """Seeds 0-3: baseline {1, 5, 9, 13}, variant {2, 6, 10, 15}. Unpaired, the seeds' own spread (sd
    5.2) hides the difference. Paired, the per-seed differences {1, 1, 1, 2} have mean 1.25 and sd 0.5:
    1.25 ± t(3 d.f.) · 0.5/√4 = 1.25 ± 3.1824 · 0.25 = [0.454, 2.046], worse; at 80% power four seeds
    are needed ((3.1824 + 0.9785) · 0.5/√4 = 1.040 ≤ 1.25), three are not ((4.3027 + 1.0607) · 0.5/√3 = 1.548)."""
    baseline, variant = [1, 5, 9, 13], [2, 6, 10, 15]
    assert difference(baseline, variant).verdict == "no measurable difference"
    paired = difference(baseline, variant, paired=True)
    half = 3.182446305284263 * 0.25
    assert paired.mean == 1.25 and (paired.low, paired.high) == pytest.approx((1.25 - half, 1.25 + half))
    assert (paired.verdict, paired.repeats_needed) == ("worse", 4)
