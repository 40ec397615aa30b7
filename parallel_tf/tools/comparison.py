"""Whether a variant differs from a baseline, judged from their repeats, as a study reports it.

Runs of a timing-dependent mode differ from repeat to repeat, so one run of each variant cannot say
which is better. Here a difference is the difference of the two means with its 95% interval, a word
for it, and how many repeats a difference of that size would need for its interval to exclude zero.
Repeats that are independent are compared with Welch's t (unequal variances, few repeats); repeats
paired by seed (--seeds: both variants train on seed k's data order and initial parameters) with the
paired t, on the per-seed differences, which leaves out how much the seeds themselves differ. And
the time a run took to reach a target on held-out data (--eval_every). Free of TensorFlow.
"""

import dataclasses
import math

import numpy as np

CONFIDENCE = 0.95
MOST_REPEATS = 1000  # repeats_needed says "more than this" rather than search further


@dataclasses.dataclass(frozen=True)
class Difference:
    mean: float  # mean(variant) - mean(baseline)
    low: float  # the 95% interval of `mean`; nan when a side has fewer than two values
    high: float
    verdict: str  # better, worse, no measurable difference, or why it is not measured
    repeats_needed: int | None  # per side, at the spreads seen, for the interval to exclude 0; None: 0 or unknown


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
    from scipy import stats  # scikit-learn's own dependency; a second to import, so only when comparing

    a, b = variance_a / count_a, variance_b / count_b
    if a + b == 0:
        return mean, mean
    # Welch-Satterthwaite; a side of variance 0 adds no term (a one-sample interval: count_a - 1 degrees)
    degrees = (a + b) ** 2 / sum(v * v / (count - 1) for v, count in ((a, count_a), (b, count_b)) if v)
    half = stats.t.ppf((1 + CONFIDENCE) / 2, degrees) * math.sqrt(a + b)
    return float(mean - half), float(mean + half)


def repeats_needed(mean, variance_a, variance_b, paired=False):
    """The fewest repeats of each side (with `paired`, of seeds: variance_a is then the per-seed
    differences') whose interval, at these spreads, would exclude 0 at a difference of `mean`; None for
    no difference; MOST_REPEATS + 1 for more than MOST_REPEATS."""
    if mean == 0:
        return None
    for count in range(2, MOST_REPEATS + 1):
        low, high = welch_interval(abs(mean), variance_a, count, variance_b, 1 if paired else count)
        if low > 0:
            return count
    return MOST_REPEATS + 1


def time_to_target(evaluations, target_accuracy=None, target_loss=None):
    """(step, seconds) of the first evaluation that reached the target (accuracy at least
    `target_accuracy`, or loss at most `target_loss`), or None if none did. `evaluations`:
    (step, seconds since the first logged step, eval_loss, eval_accuracy), in step order."""
    for step, seconds, loss, accuracy in evaluations:
        if (target_accuracy is not None and accuracy >= target_accuracy) or (
            target_loss is not None and loss <= target_loss
        ):
            return step, seconds
    return None
