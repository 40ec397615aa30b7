"""A study's report (study.py): every run's results against its reference, the verdicts (bitwise repeats, across
worker counts) and each variant's comparison on held-out data, written as report.json and report.md after every
run, and the figures when the study stops."""

import json
import os

from parallel_tf.files import write_atomically
from parallel_tf.tools import curves, drift, held_out, runs
from parallel_tf.training import run_check

# Sync's promise across worker counts (docs/reproducibility.md; tests/test_equalities.py checks it): final
# losses within this relative spread, parameters within this absolute difference.
CROSS_N_TOLERANCE = 1e-5


class Study:
    """The runs so far: report.json and report.md rewritten after each run, the figures drawn when the study
    stops (drawing them after every run cost about 2 s a run, a third of a strict study's short runs)."""

    def __init__(self, out, recipe, target_accuracy=None, target_loss=None):
        self.out = out
        self.recipe = recipe
        self.targets = {"target_accuracy": target_accuracy, "target_loss": target_loss}
        self.target = " and ".join(
            f"{what} {value:g}" for what, value in (("accuracy", target_accuracy), ("loss", target_loss)) if value
        )
        self.references = {}  # by seed (None without --seeds): each run is compared with its seed's
        self.rows = []

    def add(self, variant, num_workers, repeat, logdir, summary, seed=None):
        metrics = runs.read_metrics(logdir)
        row = {
            "variant": variant,
            "workers": num_workers,
            "repeat": repeat,
            "seed": seed,
            "params_sha256": summary["params_sha256"],
            "final_loss": summary["final_loss"],
            "eval_accuracy": summary["eval_accuracy"],
            "examples_per_sec": summary["examples_per_sec"],
            "logdir": logdir,
            "losses": [(m["step"], m["loss"]) for m in metrics],
            "held_out": held_out.evaluations(metrics, summary["train_started"]),
            "seconds": [m["wall_time"] - summary["train_started"] for m in metrics],
            "bytes_sent_per_step": summary.get("bytes_sent_per_step", 0),
            "megabytes_sent": curves.megabytes_sent(metrics),
            "declared": summary.get("declared", {}),  # every technique and option that took effect, and how
            "idle": _idle(summary),
            **_staleness(summary.get("staleness_histogram")),
        }
        if variant == "reference":
            self.references[seed] = row
        else:
            reference = self.references[seed]["logdir"]
            row["max_abs_param_diff_vs_reference"] = runs.max_param_difference(logdir, reference)
            row["distances"] = drift.distances(logdir, reference)
            self.rows.append(row)
        self._write()
        return row

    def verdicts(self):
        """Per variant: are repeats identical (not measured when each has a seed of its own), and are all
        worker counts identical (or how far apart), each worker count's first repeat against the others'."""
        verdicts = {}
        for variant in dict.fromkeys(row["variant"] for row in self.rows):
            rows = [row for row in self.rows if row["variant"] == variant]
            by_n: dict = {}
            for row in rows:
                by_n.setdefault(row["workers"], []).append(row)
            first_repeats = [group[0] for group in by_n.values()]
            losses = [row["final_loss"] for row in first_repeats]
            repeated = any(len(group) > 1 for group in by_n.values()) and rows[0]["seed"] is None
            verdicts[variant] = {  # None: not measured (one repeat, or one worker count)
                "repeats_identical": all(len({r["params_sha256"] for r in group}) == 1 for group in by_n.values())
                if repeated
                else None,
                "identical_across_workers": len({row["params_sha256"] for row in first_repeats}) == 1
                if len(by_n) > 1
                else None,
                "max_abs_param_diff_across_workers": max(
                    runs.max_param_difference(first_repeats[0]["logdir"], row["logdir"]) for row in first_repeats
                ),
                "final_loss_rel_spread_across_workers": (max(losses) - min(losses)) / abs(min(losses)),
            }
        return verdicts

    def verdict_lines(self):
        return self._lines(self.verdicts(), self.comparisons())

    def _lines(self, verdicts, comparisons):
        lines = []
        for variant, v in verdicts.items():
            lines.append(f"{variant}: repeats identical: {_yes(v['repeats_identical'])}")
            across = f"{variant}: identical across N: {_yes(v['identical_across_workers'])}"
            if v["identical_across_workers"] is False:  # bitwise is strict's promise; say how far apart
                within = _yes(
                    v["max_abs_param_diff_across_workers"] <= CROSS_N_TOLERANCE
                    and v["final_loss_rel_spread_across_workers"] <= CROSS_N_TOLERANCE
                )
                across += (
                    f"; within sync's promised {CROSS_N_TOLERANCE:g}: {within} "
                    f"(max |Δparam| = {v['max_abs_param_diff_across_workers']:.3g}, "
                    f"final loss spread {v['final_loss_rel_spread_across_workers']:.3g} relative)"
                )
            lines.append(across)
        return lines + held_out.verdict_lines(comparisons, self.target)

    def comparisons(self):
        """Each variant against the first at the same worker count, on held-out data (held_out.compare)."""
        if not self.rows or not all(row["held_out"] for row in self.rows):
            return []
        return held_out.compare(self.rows, **self.targets)

    def _write(self):
        verdicts, comparisons = self.verdicts(), self.comparisons()
        report = {
            "recipe": self.recipe,
            "reference": self._references()[0],
            "references": self._references(),
            "runs": self.rows,
            "verdicts": verdicts,
            "comparisons": comparisons,
        }
        write_atomically(os.path.join(self.out, "report.json"), json.dumps(report, indent=2) + "\n")
        write_atomically(os.path.join(self.out, "report.md"), self._markdown(verdicts, comparisons))

    def draw(self):
        """loss_curves.png, and held_out.png and drift.png where the runs have what they draw."""
        every = [*self._references(), *self.rows]
        if not every:
            return
        curves.plot(every, os.path.join(self.out, "loss_curves.png"))
        if all(row["held_out"] for row in every):
            held_out.plot_bands(every, os.path.join(self.out, "held_out.png"))
        if any(row["distances"] for row in self.rows):
            drift.plot(self.rows, os.path.join(self.out, "drift.png"))

    def _references(self):
        return list(self.references.values())

    def _markdown(self, verdicts, comparisons):
        kind = f"Variants compared with `{self.rows[0]['variant']}`" if comparisons else "Reproducibility study"
        lines = [
            f"# {kind}: {os.path.basename(self.recipe)}",
            "",
            "| variant | N | repeat | params_sha256 | final loss | eval accuracy "
            "| max \\|Δparam\\| vs reference | examples/sec | KB sent/step | mean staleness | max staleness |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in [*self._references(), *self.rows]:
            diff = row.get("max_abs_param_diff_vs_reference")
            lines.append(
                f"| {row['variant']} | {row['workers']} | {curves.repeat_name(row)} | `{row['params_sha256'][:16]}` "
                f"| {row['final_loss']:.9g} | {row['eval_accuracy']:.4f} | {_or_dash(diff, '.3g')} "
                f"| {row['examples_per_sec']:.0f} | {row['bytes_sent_per_step'] / 1000:.1f} "
                f"| {_or_dash(row['mean_staleness'], '.2f')} "
                f"| {_or_dash(row['max_staleness'], 'd')} |"
            )
        lines += held_out.markdown(comparisons, self.target)
        lines += ["", *[f"- {line}" for line in self._lines(verdicts, comparisons)], ""]
        lines += _what_ran(self.rows)
        return "\n".join(lines)


def _idle(summary):
    """The flags of the techniques on in a run that never changed anything (their effect counter is 0)."""
    return [
        f"--{d.flags[0]} ({d.effect} 0)"
        for d in run_check.DECLARATIONS
        if d.effect and d.name in summary.get("declared", {}) and not sum(_as_list(summary.get(d.effect, 0)))
    ]


def _as_list(counter):
    return counter if isinstance(counter, list) else [counter]


def _what_ran(rows):
    """What each variant's runs had on, as summary.json's `declared` says (the schedule in its clock, the
    compression algorithm, ...): a report says exactly what it compared."""
    seen: dict = {}
    for row in rows:
        seen.setdefault((row["variant"], json.dumps(row["declared"], sort_keys=True)), row["declared"])
    lines = ["## What ran", ""]
    for (variant, _), declared in seen.items():
        parts = "; ".join(f"{name} {json.dumps(what, sort_keys=True)}" for name, what in declared.items())
        lines.append(f"- `{variant}`: {parts or 'no technique or option beyond the mode'}")
    return [*lines, ""]


def _staleness(histogram):
    """Mean and largest staleness of an async run's pushes, from its [[σ, pushes], ...]; None otherwise."""
    if not histogram:
        return {"mean_staleness": None, "max_staleness": None}
    pushes = sum(count for _, count in histogram)
    return {
        "mean_staleness": sum(sigma * count for sigma, count in histogram) / pushes,
        "max_staleness": max(sigma for sigma, _ in histogram),
    }


def _or_dash(value, spec):
    return "—" if value is None else format(value, spec)


def _yes(value):
    return "not measured" if value is None else "yes" if value else "no"
