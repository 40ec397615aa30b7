"""The bench under links (bench.py --links=100mbit,1gbit,100mbit/25ms: a rate, and a one-way delay): each (model,
system, workers) of the plan runs on an unshaped network and on every link, interleaved and repeated, beside the
step time the network model predicts from the unshaped run (network_model.py); the peers run on the same links
(tf_strategies.py), and each row's x peer is against its peer on the same link. Its tables go into the report
between markers of their own, so the main tables stay.
"""

import re
import statistics

from parallel_tf.errors import ConfigError
from parallel_tf.tools import network_model
from parallel_tf.tools.bench_systems import SYSTEMS, peer_of
from parallel_tf.tools.bench_tables import ratio
from parallel_tf.training.options.link import bits_per_second

UNSHAPED = "none"
LINKS_BEGIN = "<!-- bench-links:begin (written by python -m parallel_tf.bench --links=...) -->"
LINKS_END = "<!-- bench-links:end -->"
LINKS_HEADER = [
    "system",
    "workers",
    "link",
    "ms/step",
    "spread",
    "x peer",
    "model ms",
    "outside the model",
    "KB sent",
    "KB recv",
]


def parsed(link):
    """A link of --links: 100mbit -> ("100mbit", 0.0), 100mbit/25ms -> ("100mbit", 25.0), a one-way delay after the
    rate; ConfigError naming --links otherwise."""
    rate, _, delay = link.partition("/")
    bits_per_second(rate, "links")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)ms", delay)
    if delay and not match:
        raise ConfigError(f"--links={link}: a delay is milliseconds one way after the rate, e.g. 100mbit/25ms")
    return rate, float(match[1]) if match else 0.0


def link_flags(link):
    """The run flags that put a run on `link`: --link_rate, and --link_delay where it has one."""
    rate, delay_ms = parsed(link)
    return [f"--link_rate={rate}", *([f"--link_delay={delay_ms:g}"] if delay_ms else [])]


def check_plan(plan, links):
    """ConfigError for a bad link, or the one process (no network to shape) on a link."""
    for link in links:
        parsed(link)
    if links and any(SYSTEMS[system].kind == "limit" for _, system, _ in plan):
        raise ConfigError(
            "--links: the one process sends nothing over a network, so no link can slow it; leave "
            "process out of --systems"
        )


def table_rows(model, results):
    """One row per (system, workers, link) of `model`: the median, its spread, its throughput against the
    peer's on the same link, and for ours the network model's two bounds (overlapped, serial) from the
    unshaped median and the unshaped run's bytes (the peers do not count theirs)."""
    medians = {key: statistics.median(r["ms_per_step"] for r in repeats) for key, repeats in results.items()}
    rows = []
    for (m, system, workers, link), repeats in results.items():
        if m != model:
            continue
        ms = [r["ms_per_step"] for r in repeats]
        summary = repeats[0]["summary"]
        peer = peer_of(system)
        peer_ms = medians.get((m, peer, workers, link)) if peer else None
        row = {"system": system, "workers": workers, "link": link, "ms": medians[m, system, workers, link]}
        row.update(spread=(min(ms), max(ms)), predicted=None, x_peer=peer_ms / row["ms"] if peer_ms else None)
        row.update(sent=summary.get("bytes_sent_per_step", 0), received=summary.get("bytes_received_per_step", 0))
        mode = SYSTEMS[system].mode
        if link != UNSHAPED and mode:
            sharing = workers // len(summary.get("central_exchanges_by_group", [0]))  # a ps's workers
            rate, delay_ms = parsed(link)
            shape = (mode, sharing, summary["num_ps"] or 1, row["sent"], row["received"], bits_per_second(rate))
            unshaped = medians[m, system, workers, UNSHAPED]
            share, pieces = busiest_server_share(summary), pipeline_pieces(summary)
            latency = network_model.Latency(delay_ms, summary.get("central_every", 1), steps_a_run(summary))
            row["predicted"] = (
                network_model.overlapped_ms(unshaped, *shape, pieces=pieces, server_share=share, latency=latency),
                network_model.serial_ms(unshaped, *shape, server_share=share, latency=latency),
            )
        rows.append(row)
    return rows


def steps_a_run(summary):
    """The steps each session run of the run trained (--steps_per_run, automatic or given; 1 where it had none)."""
    return (summary.get("declared", {}).get("steps_per_run") or {}).get("steps_per_run", 1)


def pipeline_pieces(summary):
    """The pieces a server's share was pipelined in (--pipeline_pieces), 0 where a step read, then wrote."""
    return summary.get("declared", {}).get("pipeline", {}).get("pipeline_pieces", 0)


def busiest_server_share(summary):
    """The busiest parameter server's share of a worker's traffic with the servers (whole variables are placed,
    so one server may carry most of it), or None where the run counted none."""
    by_server = summary.get("bytes_per_step_by_server")
    if not by_server:
        return None
    carried = [counts["sent"] + counts["received"] for counts in by_server.values()]
    return max(carried) / sum(carried)


def outside_model(row):
    """Where the measured median lies against the model's bounds: "within", or how far below the overlapped
    bound (faster than the model allows) or above the serial one (slower), relative to that bound."""
    overlapped, serial = row["predicted"]
    if row["ms"] < overlapped:
        return f"{(overlapped - row['ms']) / overlapped:.0%} below"
    if row["ms"] > serial:
        return f"{(row['ms'] - serial) / serial:.0%} above"
    return "within"


def _links_cells(row):
    low, high = row["spread"]
    predicted = row["predicted"]
    return [
        SYSTEMS[row["system"]].title,
        str(row["workers"]),
        row["link"],
        f"{row['ms']:.2f}",
        f"{low:.2f}-{high:.2f}",
        ratio(row["x_peer"]),
        "" if predicted is None else f"{predicted[0]:.2f}-{predicted[1]:.2f}",
        "" if predicted is None else outside_model(row),
        f"{row['sent'] / 1000:.1f}" if row["sent"] else "",
        f"{row['received'] / 1000:.1f}" if row["received"] else "",
    ]


def links_markdown(tables, measured, repeats, headings):
    """The generated part of the report, between LINKS_BEGIN and LINKS_END: `measured`, the lines that say when,
    where and by which command; `headings`, {model: its title and steps}."""
    parts = [
        LINKS_BEGIN,
        *measured,
        f"Repeats: {repeats}, interleaved; median ms/step (steady state), spread min-max; x peer: throughput "
        "against TensorFlow's strategy of the same kind on the same link (above 1: faster). model ms: the network "
        "model's overlapped and serial bounds from the unshaped median and bytes (parallel_tf/tools/network_model.py;"
        " the peers do not count their bytes, so they have none); outside the model: how far the median lies below the"
        " overlapped bound or above the serial one, relative to that bound.",
    ]
    for model, rows in tables.items():
        parts += ["", f"### {headings[model]}, on links", "", markdown(rows)]
    return "\n".join([*parts, LINKS_END])


def text(rows):
    """The rows as the terminal shows them."""
    return "\n".join("  ".join(cells) for cells in [LINKS_HEADER, *(_links_cells(row) for row in rows)])


def markdown(rows):
    lines = [LINKS_HEADER, ["---"] * len(LINKS_HEADER), *(_links_cells(row) for row in rows)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
