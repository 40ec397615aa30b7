"""Whether a variant differs from a baseline, judged from their repeats, as a study reports it.

Runs of a timing-dependent mode differ from repeat to repeat, so one run of each variant cannot say
which is better. Here a difference is the difference of the two means with its 95% interval, a word
for it, and how many repeats a difference of that size would need to be found at 80% power (the
convention of sample-size planning; the repeats at which the interval merely excludes zero, at the
difference seen, find it half the time).
Repeats that are independent are compared with Welch's t (unequal variances, few repeats); repeats
paired by seed (--seeds: both variants train on seed k's data order and initial parameters) with the
paired t, on the per-seed differences, which leaves out how much the seeds themselves differ. And
the time a run took to reach a target on held-out data (--eval_every). Free of TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

CONFIDENCE = 0.95
POWER = 0.80  # repeats_needed: the chance that a difference of the size seen is found
MOST_REPEATS = 1000  # repeats_needed says "more than this" rather than search further


@dataclasses.dataclass(frozen=True)
class Difference:
    mean: float  # mean(variant) - mean(baseline)
    low: float  # the 95% interval of `mean`; nan when a side has fewer than two values
    high: float
    verdict: str  # better, worse, no measurable difference, or why it is not measured
    repeats_needed: int | None  # per side, at the spreads seen, to find it at 80% power; None: 0 or unknown


def difference(baseline, variant, lower_is_better=True, paired=False):
    """The Difference of the mean of `variant` from that of `baseline` (sequences of one value per run;
    with `paired`, run i of each shares a seed)."""
    a, b = np.asarray(baseline, np.float64), np.asarray(variant, np.float64)
    mean = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return Difference(mean, math.nan, math.nan, "not measured (needs 2 repeats of each)", None)
    if paired:
        spread = (b - a).var(ddof=1)  # of the per-seed differences; a one-sample interval on them
        low, high = welch_interval(mean, spread, len(a), 0.0, 1)
        needed = repeats_needed(mean, spread, 0.0, paired=True)
    else:
        spread_a, spread_b = a.var(ddof=1), b.var(ddof=1)
        low, high = welch_interval(mean, spread_a, len(a), spread_b, len(b))
        needed = repeats_needed(mean, spread_a, spread_b)
    if low > 0 or high < 0:
        verdict = "better" if (high < 0) == lower_is_better else "worse"
    else:
        verdict = "no measurable difference"
    return Difference(mean, low, high, verdict, needed)


def welch_interval(mean, variance_a, count_a, variance_b, count_b):
    """The 95% interval of a difference of two means, from each side's sample variance and count."""
    error, degrees = _welch(variance_a, count_a, variance_b, count_b)
    if not error:
        return mean, mean
    half = _t(CONFIDENCE / 2 + 0.5, degrees) * error
    return float(mean - half), float(mean + half)


def repeats_needed(mean, variance_a, variance_b, paired=False):
    """The fewest repeats of each side (with `paired`, of seeds: variance_a is then the per-seed
    differences') at which a two-sided 95% test finds a difference of `mean` with 80% power, at these
    spreads: (t(0.975) + t(0.80))·SE ≤ |mean|, t of Welch's degrees. A difference of one standard
    deviation of each side needs 17 a side. None for no difference; MOST_REPEATS + 1 for more."""
    if mean == 0:
        return None
    for count in range(2, MOST_REPEATS + 1):
        error, degrees = _welch(variance_a, count, variance_b, 1 if paired else count)
        if not error or (_t(CONFIDENCE / 2 + 0.5, degrees) + _t(POWER, degrees)) * error <= abs(mean):
            return count
    return MOST_REPEATS + 1


def _welch(variance_a, count_a, variance_b, count_b):
    """(the standard error of the difference of the means, its Welch-Satterthwaite degrees of freedom);
    a side of variance 0 adds no term (a one-sample interval: count_a - 1 degrees)."""
    a, b = variance_a / count_a, variance_b / count_b
    if a + b == 0:
        return 0.0, math.inf
    degrees = (a + b) ** 2 / sum(v * v / (count - 1) for v, count in ((a, count_a), (b, count_b)) if v)
    return math.sqrt(a + b), degrees


def _t(quantile, degrees):
    from scipy import stats  # scikit-learn's own dependency; a second to import, so only when comparing

    return float(stats.t.ppf(quantile, degrees))


def time_to_target(evaluations, target_accuracy=None, target_loss=None):
    """(step, seconds) of the first evaluation that reached the target (accuracy at least
    `target_accuracy`, or loss at most `target_loss`), or None if none did. `evaluations`:
    (step, seconds since training started, eval_loss, eval_accuracy), in step order."""
    for step, seconds, loss, accuracy in evaluations:
        if (target_accuracy is not None and accuracy >= target_accuracy) or (
            target_loss is not None and loss <= target_loss
        ):
            return step, seconds
    return None
