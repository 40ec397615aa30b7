"""The study's verdict lines, from verdicts worked out by hand (no runs)."""

import pytest

from parallel_tf.tools import study


def lines_for(verdict):
    report = study.Study.__new__(study.Study)  # only verdict_lines, on given verdicts
    report.verdicts = lambda: {"sync": verdict}
    return report.verdict_lines()


def verdict(identical, param_diff, loss_spread):
    return {
        "repeats_identical": True,
        "identical_across_workers": identical,
        "max_abs_param_diff_across_workers": param_diff,
        "final_loss_rel_spread_across_workers": loss_spread,
    }


@pytest.mark.parametrize(
    "param_diff, loss_spread, within",
    [(2.1e-6, 8.9e-8, "yes"), (1e-5, 1e-5, "yes"), (2e-5, 8.9e-8, "no"), (2.1e-6, 3e-5, "no")],
)
def test_runs_that_differ_across_n_are_judged_against_sync_s_promised_tolerance(param_diff, loss_spread, within):
    """docs/reproducibility.md's measured figures (2.1e-6, 8.9e-8) are within the promise; a difference past 1e-5 in
    either is not. Before, such a study said only 'identical across N: no', which read as a failure."""
    line = lines_for(verdict(False, param_diff, loss_spread))[1]
    assert line.startswith(f"sync: identical across N: no; within sync's promised 1e-05: {within} (max |Δparam| = ")


def test_bitwise_runs_need_no_tolerance():
    assert lines_for(verdict(True, 0.0, 0.0)) == ["sync: repeats identical: yes", "sync: identical across N: yes"]
