"""A study's runs judged on held-out data (--eval_every): each variant against the first at the same
worker count, over repeats (comparison.py), and their held-out loss as bands. Free of TensorFlow."""

import numpy as np

from parallel_tf.tools import comparison, figures


def evaluations(metrics, started):
    """(step, seconds since training started, eval_loss, eval_accuracy) of a run's metrics lines; `started`:
    the wall time its training started (summary.json's train_started), where MLPerf starts the clock, so a
    target reached at the first evaluation takes the time to it, not 0."""
    return [
        (m["step"], m["wall_time"] - started, m["eval_loss"], m["eval_accuracy"]) for m in metrics if "eval_loss" in m
    ]


def groups(rows):
    """{(variant, N): [row, ...]}: a variant's repeats at one worker count, in the order first run."""
    grouped: dict = {}
    for row in rows:
        grouped.setdefault((row["variant"], row["workers"]), []).append(row)
    return grouped


def compare(rows, target_accuracy=None, target_loss=None):
    """One comparison per (variant, N) after the first variant, against the first at the same N: the
    final held-out loss, and with a target the seconds to reach it (compared when every run reached it)."""
    grouped = groups(rows)
    baseline_variant = rows[0]["variant"]
    return [
        _compared(variant, n, baseline_variant, grouped[(baseline_variant, n)], runs, target_accuracy, target_loss)
        for (variant, n), runs in grouped.items()
        if variant != baseline_variant and (baseline_variant, n) in grouped
    ]


def _compared(variant, n, baseline_variant, baseline, runs, target_accuracy, target_loss):
    paired = _paired_by_seed(baseline, runs)
    baseline, runs = paired or (baseline, runs)

    def measure(of_run):
        return _summarise([of_run(r) for r in baseline], [of_run(r) for r in runs], paired is not None)

    result = {"variant": variant, "workers": n, "baseline": baseline_variant, "repeats": len(runs)}
    result["paired_by_seed"] = paired is not None
    result["final_eval_loss"] = measure(lambda run: run["held_out"][-1][2])
    if target_accuracy is not None or target_loss is not None:
        result["seconds_to_target"] = measure(lambda run: _seconds(run, target_accuracy, target_loss))
    result["cautions"] = _cautions(baseline, runs)
    return result


def _cautions(baseline, runs):
    """What makes the interval say less than it seems: repeats that are bitwise copies of each other (sync's
    are, for one seed), and a technique that never acted in any run of the variant."""
    cautions = []
    if all(len(side) > 1 and len({r["params_sha256"] for r in side}) == 1 for side in (baseline, runs)):
        cautions.append(
            "every repeat of each side is bitwise the same run, so the interval measures no variation: "
            "give --seeds=0,1,2,3,4 for repeats that differ in data order and initial parameters"
        )
    never = set.intersection(*(set(r.get("idle", ())) for r in runs))
    if never:
        cautions.append(f"{', '.join(sorted(never))} in every run: it never acted, so the variant trained the baseline")
    return cautions


def _seconds(row, target_accuracy, target_loss):
    reached = comparison.time_to_target(row["held_out"], target_accuracy, target_loss)
    return None if reached is None else reached[1]


def _paired_by_seed(baseline, runs):
    """Both sides in seed order, if their runs are one per seed and the seeds are the same; else None."""
    seeds = [r["seed"] for r in baseline]
    if None in seeds or sorted(seeds) != sorted(r["seed"] for r in runs) or len(set(seeds)) < len(seeds):
        return None
    return sorted(baseline, key=lambda r: r["seed"]), sorted(runs, key=lambda r: r["seed"])


def _summarise(baseline, variant, paired):
    """Both sides' means and ranges, and their Difference when every value is known (a run that never
    reached a target has none: the sides are then described, not compared)."""
    summary = {"baseline": _described(baseline), "variant": _described(variant)}
    if None not in baseline and None not in variant:
        summary["difference"] = vars(comparison.difference(baseline, variant, paired=paired))
    return summary


def _described(values):
    known = [v for v in values if v is not None]
    described: dict[str, float] = {"known": len(known), "of": len(values)}
    if known:
        described.update(mean=float(np.mean(known)), min=float(min(known)), max=float(max(known)))
    return described


def markdown(results, target):
    """The comparison table of report.md; `target`: how the target was given, or None."""
    if not results:
        return []
    baseline = results[0]["baseline"]
    test = "paired by seed" if results[0]["paired_by_seed"] else "Welch"
    heading = f"## Against `{baseline}`, on held-out data (95% intervals over repeats, {test})"
    header = "| variant | N | repeats | final held-out loss | difference | verdict | repeats needed |"
    rule = "|---|---|---|---|---|---|---|"
    if target:
        header += f" seconds to {target} | difference | verdict |"
        rule += "---|---|---|"
    lines = ["", heading, "", header, rule]
    for result in results:
        cells = [f"`{result['variant']}`", str(result["workers"]), str(result["repeats"])]
        cells += _cells(result["final_eval_loss"], with_repeats=True)
        if target:
            cells += _cells(result["seconds_to_target"], with_repeats=False)
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- `{r['variant']}` (N={r['workers']}): {c}" for r in results for c in r.get("cautions", ())]
    return lines + ([""] + notes if notes else [])


def _cells(summary, with_repeats):
    described = summary["variant"]
    if not described["known"]:
        value = f"not reached (0 of {described['of']})"
    else:
        value = f"{described['mean']:.4g} ({described['min']:.4g}–{described['max']:.4g})"
        if described["known"] < described["of"]:
            value += f", reached by {described['known']} of {described['of']}"
    difference = summary.get("difference")
    if difference is None:
        cells = [value, "—", "not compared (a run did not reach it)"]
    else:
        cells = [value, _span(difference), difference["verdict"]]
    if with_repeats:
        needed = difference and difference["repeats_needed"]
        cells.append(
            "—" if not needed else f"> {comparison.MOST_REPEATS}" if needed > comparison.MOST_REPEATS else str(needed)
        )
    return cells


def verdict_lines(results, target):
    """One printed line per comparison."""
    lines = []
    for result in results:
        line = f"{result['variant']} (N={result['workers']}) against {result['baseline']}: final held-out loss "
        line += _word(result["final_eval_loss"])
        if target:
            line += f"; seconds to {target}: " + _word(result["seconds_to_target"])
        lines.append(line + "".join(f" (note: {caution})" for caution in result.get("cautions", ())))
    return lines


def _word(summary):
    difference = summary.get("difference")
    if difference is None:
        return f"not compared (reached by {summary['variant']['known']} of {summary['variant']['of']})"
    return f"{_span(difference)}, {difference['verdict']}"


def _span(difference):
    """'+3 [+0.733, +5.27]': the difference and its interval, or the difference alone (one repeat)."""
    if np.isnan(difference["low"]):
        return f"{difference['mean']:+.3g}"
    return f"{difference['mean']:+.3g} [{difference['low']:+.3g}, {difference['high']:+.3g}]"


def plot_bands(rows, path):
    """Held-out loss against step and against seconds: for each variant and worker count the mean over
    its repeats, and the band from the lowest to the highest (every repeat evaluates at the same steps;
    the time axis is the repeats' mean time of each evaluation)."""
    pyplot = figures.pyplot()
    figure, (by_step, by_time) = pyplot.subplots(1, 2, figsize=(15, 6.5), sharey=True)
    for (variant, n), runs in groups(rows).items():
        count = min(len(r["held_out"]) for r in runs)  # a repeat cut short would have fewer
        table = np.array([[e[:3] for e in r["held_out"][:count]] for r in runs])  # runs × evaluations × 3
        steps, seconds, losses = table[0, :, 0], table[:, :, 1].mean(axis=0), table[:, :, 2]
        label = f"{variant} N={n} ({len(runs)} repeat{'s' * (len(runs) > 1)})"
        line = by_step.plot(steps, losses.mean(axis=0), linewidth=1.5, label=label)[0]
        for axes, x in ((by_step, steps), (by_time, seconds)):
            axes.fill_between(x, losses.min(axis=0), losses.max(axis=0), color=line.get_color(), alpha=0.2)
        by_time.plot(seconds, losses.mean(axis=0), linewidth=1.5, color=line.get_color())
    by_step.set_xlabel("global step")
    by_time.set_xlabel("seconds since training started (mean over repeats)")
    by_step.set_ylabel("held-out loss (mean; band: lowest to highest repeat)")
    by_step.set_yscale("log")
    for axes in (by_step, by_time):
        axes.grid(True, which="both", alpha=0.3)
    by_step.legend(fontsize="small")
    figure.tight_layout()
    figures.save(figure, path)
