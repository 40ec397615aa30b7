"""The open issues' targets for the bench (bench.py): which run must reach what ratio against which other,
the runs --quick makes to measure them, and the lines that say whether this run met them."""

from parallel_tf.tools.bench_systems import PEERS, SYSTEMS

# The open issues' targets: (model, system, workers, against, at least). `against` is "limit", "peer" or "floor";
# a peer runs at TensorFlow's defaults (bench_systems.PEERS), the one process's on one worker.
TARGETS = (
    ("mlp", "sync_step", 1, "floor", 0.8),  # parameter-server sync, a run a step, at its floor: within 1.25x of it
    ("mlp", "sync", 2, "peer", 0.8),
    ("mlp", "async", 2, "peer", 1.2),
    ("mlp", "allreduce", 1, "limit", 0.9),  # the all-reduce mode, with the default settings (issue 51)
    ("mlp", "allreduce", 2, "peer", 1.5),  # issue 56: latency-bound, ahead of TensorFlow
    ("mlp", "allreduce", 4, "peer", 1.0),
    ("cnn", "allreduce_fast", 2, "peer", 1.0),  # issue 56: TensorFlow's own kernels, as fast as its strategy
    ("cnn", "process", 1, "peer", 0.5),  # issue 56: portable bits within 2x of TensorFlow's fast path (goal 0.67)
    ("cnn", "allreduce", 2, "peer", 0.5),
)


def comparison_key(model, system, workers, against):
    """The (model, system, workers) a target's run is compared with."""
    if against == "limit":
        return (model, "process", 1)
    if against == "floor":
        return (model, "floor", workers)
    return (model, PEERS[SYSTEMS[system].kind], 1 if SYSTEMS[system].kind == "limit" else workers)


# --quick runs what the targets need: each target's run and the run it is compared with.
QUICK_PLAN = tuple(
    dict.fromkeys(
        key
        for model, system, workers, against, _ in TARGETS
        for key in ((model, system, workers), comparison_key(model, system, workers, against))
    )
)


def target_lines(tables):
    """Each of the issue's targets that this run measured: the ratio, and met or by how much missed."""
    lines = []
    for model, system, workers, against, at_least in TARGETS:
        row = next((r for r in tables.get(model, []) if (r["system"], r["workers"]) == (system, workers)), None)
        ratio = row and row[f"x_{against}"]
        if ratio is None:
            continue
        versus = (
            "the one process"
            if against == "limit"
            else SYSTEMS[comparison_key(model, system, workers, against)[1]].title
        )
        verdict = "met" if ratio >= at_least else f"missed by {at_least - ratio:.2f}"
        lines.append(
            f"- target {model} {SYSTEMS[system].title}, {workers} worker(s): at least {at_least}x {versus}; "
            f"measured {ratio:.2f}x: {verdict}"
        )
    return lines
