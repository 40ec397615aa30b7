"""How far a study's runs drift from the one-process reference as they train: the largest parameter
difference at each snapshot (--snapshot_every), drawn per worker count on a log scale where the
runs that stay bitwise equal sit on a line of their own. Free of TensorFlow."""

import os

import numpy as np

from parallel_tf.backports import cache, removesuffix, zip_strict
from parallel_tf.tools import figures
from parallel_tf.training.outputs import SNAPSHOTS

BITWISE = 1e-12  # where a difference of exactly 0 is drawn: below any float32 rounding of these models


@cache  # a finished run's snapshots never change, and the study redraws after every run
def distances(logdir, reference_logdir):
    """[(step, largest |Δparam| from the reference at that step)] for the steps both runs saved."""
    steps = sorted(_snapshot_steps(logdir) & _snapshot_steps(reference_logdir))
    return [(step, _max_difference(logdir, reference_logdir, step)) for step in steps]


def _snapshot_steps(logdir):
    directory = os.path.join(logdir, SNAPSHOTS)
    if not os.path.isdir(directory):
        return set()
    return {int(removesuffix(name, ".npz")) for name in os.listdir(directory) if removesuffix(name, ".npz").isdigit()}


def _max_difference(logdir_a, logdir_b, step):
    path_a, path_b = (os.path.join(logdir, SNAPSHOTS, f"{step}.npz") for logdir in (logdir_a, logdir_b))
    with np.load(path_a) as a, np.load(path_b) as b:
        return max(float(np.abs(a[name].astype(np.float64) - b[name]).max()) for name in a.files)


def plot(rows, path):
    """Two panels, one line per variant and worker count (its first repeat: sync repeats are bitwise
    equal): the drift from the one-process reference, and from the variant's own run at its smallest
    worker count, where strict determinism's promise (the same bits for every N) shows."""
    pyplot = figures.pyplot()
    firsts: dict = {}
    for row in rows:
        firsts.setdefault((row["variant"], row["workers"]), row)
    smallest: dict = {}
    for variant, n in firsts:
        smallest[variant] = min(n, smallest.get(variant, n))
    figure, (from_reference, within) = pyplot.subplots(1, 2, figsize=(15, 6), sharey=True)
    for (variant, n), row in firsts.items():
        label = f"{variant} N={n}"
        line = _draw(from_reference, row["distances"], label)
        if n != smallest[variant]:
            base = firsts[(variant, smallest[variant])]
            _draw(within, distances(row["logdir"], base["logdir"]), label, line and line.get_color())
    from_reference.set_ylabel("largest |parameter difference|")
    from_reference.set_title("from the one-process reference")
    within.set_title("from the same variant at its smallest worker count")
    for axes in (from_reference, within):
        axes.set_yscale("log")
        axes.axhline(BITWISE, color="k", linewidth=0.8, linestyle=":")
        axes.annotate(
            "bitwise equal", (0.01, BITWISE), xycoords=("axes fraction", "data"), va="bottom", fontsize="small"
        )
        axes.set_xlabel("global step")
        axes.grid(True, which="both", alpha=0.3)
    from_reference.legend(fontsize="small")
    figure.tight_layout()
    figures.save(figure, path)


def _draw(axes, steps_and_differences, label, color=None):
    """A line of (step, difference) with exact zeros drawn at BITWISE; None if there is nothing to draw."""
    if not steps_and_differences:
        return None
    steps, differences = zip_strict(*steps_and_differences)
    lifted = [max(d, BITWISE) for d in differences]
    return axes.plot(steps, lifted, marker="o", markersize=3, label=label, color=color)[0]
