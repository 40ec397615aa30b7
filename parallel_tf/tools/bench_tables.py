"""The bench's tables (bench.py): a row per (system, workers) with its median, spread and ratios against the
limit, its peer and the floor, as text and Markdown, a traced step's profile, and the throughput plot."""

import json
import os
import platform
import statistics

from parallel_tf.backports import zip_strict
from parallel_tf.tools import figures
from parallel_tf.tools.bench_systems import MODELS, SYSTEMS, peer_of, same_kernels_peer_of
from parallel_tf.training import profiling


def table_rows(model, results, global_batch_size):
    """One row per (system, workers) of `model`: medians, spreads and ratios (None where there is no peer)."""
    medians = {
        (system, n): statistics.median(r["ms_per_step"] for r in rs)
        for (m, system, n), rs in results.items()
        if m == model
    }
    limit = next((ms for (system, _), ms in medians.items() if system == "process"), None)
    rows = []
    for (system, n), ms in medians.items():
        spread = [r["ms_per_step"] for r in results[(model, system, n)]]
        summary = results[(model, system, n)][0]["summary"]
        peer, same = peer_of(system), same_kernels_peer_of(system)
        peer_ms = medians.get((peer, 1 if SYSTEMS[system].kind == "limit" else n)) if peer else None
        same_ms = medians.get((same, 1 if SYSTEMS[system].kind == "limit" else n)) if same else None
        looped = "steps_per_run" in summary.get("declared", {})  # k steps a run, given or automatic
        one_run_a_step = SYSTEMS[system].mode == "sync" and not looped
        floor_ms = medians.get(("floor", n)) if one_run_a_step else None  # a run of k steps can go below it
        rows.append(
            {
                "system": system,
                "workers": n,
                "ms": ms,
                "spread": (min(spread), max(spread)),
                "examples_per_sec": 1000.0 * global_batch_size / ms,
                "x_limit": limit / ms if limit else None,
                "x_peer": peer_ms / ms if peer_ms else None,
                "x_peer_same_kernels": same_ms / ms if same_ms else None,
                "x_floor": floor_ms / ms if floor_ms else None,
                "kb_sent": summary.get("bytes_sent_per_step", 0) / 1000,
                "kb_received": summary.get("bytes_received_per_step", 0) / 1000,
                "run_s": statistics.median(r["run_secs"] for r in results[(model, system, n)]),
                # the most the hypervisor took of a CPU in any repeat (cpu_steal.py): a row it slowed shows it
                "steal": max(
                    (r["steal"] for r in results[(model, system, n)] if r.get("steal") is not None), default=None
                ),
            }
        )
    return rows


def ratio(value):
    return "" if value is None else f"{value:.2f}"


def _cells(row):
    low, high = row["spread"]
    return [
        SYSTEMS[row["system"]].title,
        str(row["workers"]),
        f"{row['ms']:.2f}",
        f"{low:.2f}-{high:.2f}",
        f"{row['examples_per_sec']:.0f}",
        ratio(row["x_limit"]),
        ratio(row["x_peer"]),
        ratio(row["x_peer_same_kernels"]),
        ratio(row["x_floor"]),
        f"{row['kb_sent']:.1f}" if row["kb_sent"] else "",
        f"{row['kb_received']:.1f}" if row["kb_received"] else "",
        f"{row['run_s']:.1f}",
        "" if row["steal"] is None else f"{100 * row['steal']:.0f}%",
    ]


HEADER = [
    "system",
    "workers",
    "ms/step",
    "spread",
    "examples/s",
    "x limit",
    "x peer",
    "x peer, same kernels",
    "x floor",
    "KB sent",
    "KB recv",
    "run s",
    "steal",
]


def text_table(rows):
    widths = [40, 8, 9, 14, 11, 8, 8, 22, 8, 9, 9, 8, 7]
    lines = [HEADER, *(_cells(row) for row in rows)]
    return "\n".join(
        "".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip_strict(cells, widths)))
        for cells in lines
    )


def markdown_table(rows):
    lines = [HEADER, ["---"] * len(HEADER), *(_cells(row) for row in rows)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def print_profile(results):
    """Where a traced step's time went (--trace_steps), the means over the last repeat's traced steps: its
    wall time, op time by kind on every task it touched (profiling.py; kinds overlap in time), and its
    cross-task edges (RecvTensor RPCs), over all its runs."""
    header = "".join(f"{kind:>10}" for kind in profiling.KINDS)
    print(f"\n{'traced steps (ms)':<36}{'workers':>8}{'wall':>9}{header}{'edges':>8}")
    for (model, system, workers), repeats in results.items():
        path = os.path.join(repeats[-1]["logdir"], "trace_breakdown.jsonl")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            traced = [json.loads(line) for line in f]
        steps = len({t["step"] for t in traced})
        wall = sum(t["wall_ms"] for t in traced) / steps
        kinds = "".join(f"{sum(t['op_ms'][kind] for t in traced) / steps:>10.2f}" for kind in profiling.KINDS)
        edges = sum(len(t["partition_edges"]) for t in traced) / steps
        print(f"{model + ' ' + SYSTEMS[system].title:<36}{workers:>8}{wall:>9.2f}{kinds}{edges:>8.1f}")


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def plot_throughput(tables, png):
    """examples/s against worker count, one panel per model, a line per system, the limit dashed."""
    figure, axes = figures.pyplot().subplots(1, len(tables), figsize=(6 * len(tables), 4.5), squeeze=False)
    for axis, (model, rows) in zip_strict(axes[0], tables.items()):
        for system in dict.fromkeys(row["system"] for row in rows):
            points = sorted((r["workers"], r["examples_per_sec"]) for r in rows if r["system"] == system)
            if SYSTEMS[system].kind == "limit":
                axis.axhline(points[0][1], linestyle="--", color="black", label=SYSTEMS[system].title)
            else:
                axis.plot(*zip_strict(*points), marker="o", label=SYSTEMS[system].title)
        axis.set_title(MODELS[model].title.split(" (")[0])
        axis.set_xlabel("workers")
        axis.set_ylabel("examples/s (median)")
        axis.set_xticks(sorted({row["workers"] for row in rows}))
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figures.save(figure, png, dpi=100)
