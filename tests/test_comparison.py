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


def test_the_repeats_a_difference_needs():
    """The same spreads: with 2 repeats a side the half-width is t(2 d.f.) · √(2/2) = 4.303 > 3, with 3
    it is 2.776 · √(2/3) = 2.267 < 3, so 3. A difference of 0.5 needs t(2n-2) · √(2/n) < 0.5:
    2.0003 · √(2/31) = 0.508, 1.9990 · √(2/32) = 0.4997, so 32, and 3 repeats cannot tell."""
    assert difference([1, 2, 3], [4, 5, 6]).repeats_needed == 3
    small = difference([1, 2, 3], [1.5, 2.5, 3.5])
    assert small.verdict == "no measurable difference" and small.low < 0 < small.high
    assert small.repeats_needed == 32


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
    1.25 ± t(3 d.f.) · 0.5/√4 = 1.25 ± 3.1824 · 0.25 = [0.454, 2.046], worse; three seeds would do
    (4.3027 · 0.5/√3 = 1.242 < 1.25), two would not (12.706 · 0.5/√2 = 4.49)."""
    baseline, variant = [1, 5, 9, 13], [2, 6, 10, 15]
    assert difference(baseline, variant).verdict == "no measurable difference"
    paired = difference(baseline, variant, paired=True)
    half = 3.182446305284263 * 0.25
    assert paired.mean == 1.25 and (paired.low, paired.high) == pytest.approx((1.25 - half, 1.25 + half))
    assert (paired.verdict, paired.repeats_needed) == ("worse", 3)
