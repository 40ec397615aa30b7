"""Benchmark: our runs beside TensorFlow's own strategies on the same models, interleaved and repeated.

    python -m parallel_tf.bench [--quick] [--models=mlp,cnn] [--systems=...] [--workers=1,2,4]
                                [--repeats=3] [--report=BENCHMARKS.md] [--out=DIR] [--trace_steps=FIRST:END]

For each repeat it runs every (model, system, worker count) once, in turn, so the machine's drift
spreads over all of them alike. A system is the recipe in one process (the limit), one of our
modes on a local cluster, a peer: MultiWorkerMirroredStrategy (sync) or ParameterServerStrategy
(async), on the same model, initial values, data order and global batch (tf_strategies.py), or the
parameter-server floor: the two crossings and the compute of a sync step, and nothing else (floor_task.py).
ms/step is the steady state: the chief's logged intervals after the first (start-up and warm-up).
The tables give median and spread over repeats, examples/s, throughput against the limit, against
the peer of the same kind at the same worker count and (parameter-server sync) against the floor, and
what the chief sends and receives per step. --report writes the tables, the targets and a PNG of
throughput against worker count into a Markdown file, between markers, so the prose around them
survives a re-run.
"""

import dataclasses
import json
import os
import platform
import statistics
import sys
import time

from absl import app, flags

from parallel_tf.cli import exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.errors import ConfigError
from parallel_tf.files import write_between
from parallel_tf.launch.launcher import resolve_recipe
from parallel_tf.tools import figures, network_model, runs
from parallel_tf.training import profiling, run_check, run_flags
from parallel_tf.training.options.link import bits_per_second

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Model:
    title: str
    recipe: str
    flags: tuple
    train_steps: int
    quick_steps: int


@dataclasses.dataclass(frozen=True)
class System:
    title: str
    kind: str  # "limit", "sync", "async" or "floor": whom it is compared with
    mode: str = None  # ours: the launcher's --mode; None for the one process and the peers
    flags: tuple = ()
    strategy: str = None  # a peer's tf_strategies --strategy
    min_workers: int = 1
    steps_per_run: int = 1  # ours: --steps_per_run; the logging interval is rounded up to a multiple of it
    ps_per_worker: bool = False  # ours: --num_ps=N, a parameter server for each of the N workers


MODELS = {
    "mlp": Model("digits MLP 64-128-10 (recipes/mnist.py), latency-bound", "mnist", (), 500, 300),
    "cnn": Model(
        "CIFAR-10 CNN on synthetic data (recipes/cifar10.py), compute-bound",
        "cifar10",
        ("--dataset=synthetic",),
        40,
        20,
    ),
}
SYSTEMS = {
    "process": System("one process (the limit)", "limit"),
    "process_fast": System("one process, --kernels=fast", "limit", flags=("--kernels=fast",)),
    "floor": System("parameter-server floor", "floor", strategy="floor"),
    "sync": System("sync, ordered", "sync", mode="sync"),
    "sync_servers": System("sync, a ps per worker", "sync", mode="sync", ps_per_worker=True, min_workers=2),
    "sync_fast": System("sync, ordered, --kernels=fast", "sync", mode="sync", flags=("--kernels=fast",)),
    "strict": System("sync, strict", "sync", mode="sync", flags=("--strict_determinism",)),
    "accumulator": System("sync, accumulator", "sync", mode="sync", flags=("--aggregation=accumulator",)),
    "sync_loop": System("sync, ordered, 10 steps a run", "sync", mode="sync", steps_per_run=10),
    "sync_8bit": System("sync, ordered, 8-bit gradients", "sync", mode="sync", flags=("--gradient_compression=8bit",)),
    "allreduce": System("all-reduce", "sync", mode="allreduce"),
    "allreduce_strict": System("all-reduce, strict", "sync", mode="allreduce", flags=("--strict_determinism",)),
    "allreduce_fp16": System(
        "all-reduce, float16 transport", "sync", mode="allreduce", flags=("--allreduce_transport=float16",)
    ),
    "allreduce_powersgd1": System(
        "all-reduce, PowerSGD rank 1", "sync", mode="allreduce", flags=("--powersgd_rank=1",)
    ),
    "allreduce_powersgd4": System(
        "all-reduce, PowerSGD rank 4", "sync", mode="allreduce", flags=("--powersgd_rank=4",)
    ),
    "allreduce_8bit": System(
        "all-reduce, 8-bit codes gathered", "sync", mode="allreduce", flags=("--gradient_compression=8bit",)
    ),
    "allreduce_buckets": System(
        "all-reduce, 1 MB buckets", "sync", mode="allreduce", flags=("--allreduce_bucket_mb=1",)
    ),
    "async": System("async", "async", mode="async"),
    "hierarchical": System("hierarchical, 2 groups", "async", mode="hierarchical", min_workers=2),
    "mirrored": System("MultiWorkerMirroredStrategy", "sync", strategy="mirrored"),
    "parameter_server": System("ParameterServerStrategy", "async", strategy="parameter_server", min_workers=2),
}
# The ways of talking less, which pay only on a link: the full run (BENCHMARKS.md's main tables) leaves them to
# --links.
ON_LINKS = (
    "sync_servers",
    "sync_8bit",
    "allreduce_fp16",
    "allreduce_8bit",
    "allreduce_buckets",
    "allreduce_powersgd1",
    "allreduce_powersgd4",
)
FULL_RUN = tuple(name for name in SYSTEMS if name not in ON_LINKS)

PEERS = {"sync": "mirrored", "async": "parameter_server"}
QUICK_REPEATS = 2
# The open issues' targets: (model, system, workers, against, at least). `against` is "limit", "peer" or "floor".
TARGETS = (
    ("mlp", "sync", 1, "floor", 0.8),  # parameter-server sync at its floor: within 1.25x of it
    ("mlp", "sync", 2, "peer", 0.8),
    ("mlp", "async", 2, "peer", 1.2),
    ("cnn", "sync", 1, "limit", 0.97),
    ("mlp", "allreduce", 1, "limit", 0.8),  # the all-reduce mode
    ("mlp", "allreduce", 2, "peer", 1.0),
    ("mlp", "allreduce", 4, "peer", 1.0),
    ("cnn", "allreduce", 1, "peer", 1.0),
    ("cnn", "allreduce", 2, "peer", 1.0),
)


def comparison_key(model, system, workers, against):
    """The (model, system, workers) a target's run is compared with."""
    if against == "limit":
        return (model, "process", 1)
    return (model, "floor" if against == "floor" else PEERS[SYSTEMS[system].kind], workers)


# --quick runs what the targets need: each target's run and the run it is compared with.
QUICK_PLAN = tuple(
    dict.fromkeys(
        key
        for model, system, workers, against, _ in TARGETS
        for key in ((model, system, workers), comparison_key(model, system, workers, against))
    )
)

MIN_STEPS = 10  # logged every tenth of the run, and the first interval left out
BEGIN, END = "<!-- bench:begin (written by python -m parallel_tf.bench) -->", "<!-- bench:end -->"
# The bench under links (--links=100mbit,1gbit): each (model, system, workers) of the plan runs on an unshaped
# network and on every link, interleaved and repeated, beside the step time the network model predicts from the
# unshaped run (network_model.py); the peers run on the same links (tf_strategies.py), and each row's x peer is
# against its peer on the same link. Its tables go into the report between markers of their own, so the main
# tables stay.
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


def define_bench_flags():
    flags.DEFINE_list("models", list(MODELS), f"Models to run: {', '.join(MODELS)}.")
    flags.DEFINE_list(
        "systems",
        list(FULL_RUN),
        f"Systems to run: {', '.join(SYSTEMS)}. Default: all but the ways of talking less ({', '.join(ON_LINKS)}), "
        "which pay only on a link (--links).",
    )
    flags.DEFINE_list("workers", ["1", "2", "4"], "Worker counts.")
    flags.DEFINE_integer("repeats", 3, "Runs of each (model, system, worker count), interleaved.", lower_bound=1)
    flags.DEFINE_bool(
        "quick",
        False,
        "A smaller plan: the runs the targets need, fewer steps, 2 repeats; --models, "
        "--systems, --workers and --repeats given as well narrow it or win.",
    )
    flags.DEFINE_string("report", None, "Markdown file to write the results into (e.g. BENCHMARKS.md).")
    flags.DEFINE_string("out", None, "Directory for the runs; default runs/bench-<time>.")
    flags.DEFINE_list(
        "links",
        [],
        "Run every system of the plan unshaped and on each of these links (100mbit, 1gbit, ...; launch/hosts.py), "
        "beside the network model's prediction (tools/network_model.py): its own tables in the report.",
    )
    run_flags.define_run_flags()


def main(argv):
    if len(argv) > 1:
        exit_config_error(f"unexpected argument {argv[1]!r}; flags look like --name=value")
    try:
        plan = make_plan()
        profiling.parse_steps(FLAGS.trace_steps)
        check_links_plan(plan, FLAGS.links)
    except ConfigError as e:
        exit_config_error(str(e))
    out = runs.out_dir(FLAGS.out, "bench")
    if FLAGS.links:
        return bench_on_links(plan, out)
    try:
        results = run_plan(plan, out)
    except KeyboardInterrupt:  # the run under way gets the same Ctrl-C and stops its own tasks
        print(f"\n[bench] interrupted; the runs finished so far are in {out}", file=sys.stderr)
        sys.exit(130)
    batch = FLAGS.global_batch_size
    tables = {name: table_rows(name, results, batch) for name in dict.fromkeys(model for model, _, _ in plan)}
    for name, rows in tables.items():
        print(f"\n{MODELS[name].title}, {steps_of(name)} steps, global batch {FLAGS.global_batch_size}")
        print(text_table(rows))
    print("\n" + "\n".join(target_lines(tables)))
    if FLAGS.trace_steps:
        print_profile(results)
    if FLAGS.report:
        write_report(FLAGS.report, report_markdown(tables, results, FLAGS.report))
        print(f"\nwrote {FLAGS.report}")
    print(f"\n[bench] the runs (summary.json, metrics.jsonl, each run's logs) are in {out}")


def repeats():
    return QUICK_REPEATS if FLAGS.quick and not FLAGS["repeats"].present else FLAGS.repeats


def steps_of(model):
    if FLAGS["train_steps"].present:
        return FLAGS.train_steps
    return MODELS[model].quick_steps if FLAGS.quick else MODELS[model].train_steps


def make_plan():
    """[(model, system, workers)], in the order of one repeat; ConfigError for unknown names."""
    for flag_name, known in (("models", MODELS), ("systems", SYSTEMS)):
        unknown = [name for name in FLAGS[flag_name].value if name not in known]
        if unknown:
            raise ConfigError(f"--{flag_name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if steps_of(FLAGS.models[0]) < MIN_STEPS:
        raise ConfigError(
            f"--train_steps={FLAGS.train_steps}: the bench needs at least {MIN_STEPS} to see a steady state"
        )
    workers = positive_ints("workers", FLAGS.workers)
    for count in workers:
        if FLAGS.global_batch_size % count:
            raise ConfigError(f"--workers: {count} does not divide --global_batch_size={FLAGS.global_batch_size}")
    plan = []
    for model in FLAGS.models:
        for name in FLAGS.systems:
            system = SYSTEMS[name]
            counts = [1] if system.kind == "limit" else [n for n in workers if n >= system.min_workers]
            plan += [(model, name, n) for n in counts]
    return [key for key in QUICK_PLAN if key in plan] if FLAGS.quick else plan


def run_plan(plan, out, links=()):
    """{(model, system, workers): [result per repeat]}: each result has ms_per_step, the run's summary and logdir.
    With `links`, the keys end with the link: every (model, system, workers) unshaped, then on each link."""
    keys = [(*key, link) for key in plan for link in (UNSHAPED, *links)] if links else plan
    results = {key: [] for key in keys}
    started = time.time()
    total = repeats() * len(keys)
    for repeat in range(repeats()):
        for index, key in enumerate(keys):
            model, system, workers, *link = key
            logdir = os.path.join(out, "-".join([model, system, f"{workers}w", *link, f"r{repeat + 1}"]))
            done = repeat * len(keys) + index
            eta = "" if not done else f", about {(time.time() - started) / done * (total - done) / 60:.1f} min left"
            on_link = f", link {link[0]}" if link else ""
            print(
                f"[bench] {done + 1}/{total}: {model}, {SYSTEMS[system].title}, {workers} worker(s){on_link}{eta}",
                flush=True,
            )
            command, given = command_for(model, system, workers)
            shaped = [f"--link_rate={rate}" for rate in link if rate != UNSHAPED]
            try:
                summary = runs.run(command, logdir, [*given, *shaped], log_path=logdir + ".log")
            except runs.RunFailed as e:
                print(
                    f"error: {model}, {system} with {workers} worker(s){on_link} {e}\n(full output: {logdir}.log)",
                    file=sys.stderr,
                )
                sys.exit(1)
            results[key].append({"ms_per_step": steady_ms_per_step(logdir), "summary": summary, "logdir": logdir})
    return results


def command_for(model_name, system_name, workers):
    """(command, flags) of one run: the limit, one of our clusters, or a peer."""
    model, system = MODELS[model_name], SYSTEMS[system_name]
    recipe = resolve_recipe(model.recipe)
    steps = steps_of(model_name)
    given = [flag for flag in run_check.given_task_flags(run_check.NO_CLUSTER) if not flag.startswith("--train_steps=")]
    per_run = system.steps_per_run
    log_every = -(-max(1, steps // 10) // per_run) * per_run  # a tenth of the run, in whole runs of steps
    run_flags = [f"--train_steps={steps}", f"--log_every={log_every}", *model.flags, *given]
    if system.strategy:  # the peers trace nothing and save nothing
        command = [sys.executable, "-m", "parallel_tf.tools.tf_strategies", f"--strategy={system.strategy}"]
        run_flags = [flag for flag in run_flags if not flag.startswith("--trace_steps")]
        return [*command, f"--num_workers={workers}", f"--recipe={recipe}"], run_flags
    # Ours checkpoint only at the end, unless told otherwise: a save inside the measured steps would count.
    run_flags = ["--checkpoint_every=0", *run_flags]
    if system.kind == "limit":
        return runs.single_process_command(recipe), [*run_flags, *system.flags]
    loop = [f"--steps_per_run={per_run}"] if per_run > 1 else []
    servers = [f"--num_ps={workers}"] if system.ps_per_worker else []
    return runs.cluster_command(recipe, system.mode, workers, *servers), [*run_flags, *system.flags, *loop]


def steady_ms_per_step(logdir):
    """ms/step over the logged intervals after the first: the steady state, without start-up and warm-up."""
    first, *_, last = runs.read_metrics(logdir)
    return 1000.0 * (last["wall_time"] - first["wall_time"]) / (last["step"] - first["step"])


def peer_of(system):
    """The peer a system's throughput is compared with: TensorFlow's strategy of its kind; None for the one
    process and for the peers themselves."""
    peer = PEERS.get(SYSTEMS[system].kind)
    return peer if peer != system else None


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
        peer = peer_of(system)
        peer_ms = medians.get((peer, n)) if peer else None
        one_run_a_step = SYSTEMS[system].mode == "sync" and SYSTEMS[system].steps_per_run == 1
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
                "x_floor": floor_ms / ms if floor_ms else None,
                "kb_sent": summary.get("bytes_sent_per_step", 0) / 1000,
                "kb_received": summary.get("bytes_received_per_step", 0) / 1000,
            }
        )
    return rows


def _ratio(value):
    return "" if value is None else f"{value:.2f}"


def _cells(row):
    low, high = row["spread"]
    return [
        SYSTEMS[row["system"]].title,
        str(row["workers"]),
        f"{row['ms']:.2f}",
        f"{low:.2f}-{high:.2f}",
        f"{row['examples_per_sec']:.0f}",
        _ratio(row["x_limit"]),
        _ratio(row["x_peer"]),
        _ratio(row["x_floor"]),
        f"{row['kb_sent']:.1f}" if row["kb_sent"] else "",
        f"{row['kb_received']:.1f}" if row["kb_received"] else "",
    ]


HEADER = ["system", "workers", "ms/step", "spread", "examples/s", "x limit", "x peer", "x floor", "KB sent", "KB recv"]


def text_table(rows):
    widths = [30, 8, 9, 14, 11, 8, 8, 8, 9, 9]
    lines = [HEADER, *(_cells(row) for row in rows)]
    return "\n".join(
        "".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )
        for cells in lines
    )


def markdown_table(rows):
    lines = [HEADER, ["---"] * len(HEADER), *(_cells(row) for row in rows)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


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


def report_markdown(tables, results, path):
    """The generated part of the report, between BEGIN and END; draws the PNG beside `path`."""
    png = os.path.splitext(path)[0] + ".png"
    plot_throughput(tables, png)
    tf_version = next(iter(results.values()))[0]["summary"]["tf_version"]
    parts = [
        BEGIN,
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine()}, TensorFlow {tf_version}, by",
        "",
        "```bash\n" + " ".join(["python -m parallel_tf.bench", *shown_flags(sys.argv[1:])]) + "\n```",
        "",
        f"Repeats: {repeats()}, interleaved; median ms/step over repeats (steady state: the logged "
        "intervals after the first), spread min-max; x limit, x peer and x floor are throughput ratios (above 1: "
        "faster); x floor: a parameter-server sync row against the floor of as many workers, each reading the "
        "parameters from the ps, computing its gradients and writing them back in one session run, with no "
        "gather, apply or wait (parallel_tf/tools/floor_task.py).",
    ]
    for model, rows in tables.items():
        parts += ["", f"### {MODELS[model].title}, {steps_of(model)} steps, global batch {FLAGS.global_batch_size}"]
        parts += ["", markdown_table(rows)]
    parts += ["", "### Targets", "", *target_lines(tables)]
    parts += ["", f"![throughput against worker count]({os.path.basename(png)})"]
    return "\n".join([*parts, END])


def shown_flags(argv):
    """The command's flags as the report shows them: where its runs went is of no use to a reader."""
    return [arg for arg in argv if not arg.startswith("--out=")]


def write_report(path, generated, begin=BEGIN, end=END):
    """`generated` in place of the old one between `begin` and `end` in `path` (files.write_between)."""
    write_between(path, generated, begin, end, new_file_title="# Benchmarks")


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
    for axis, (model, rows) in zip(axes[0], tables.items(), strict=True):
        for system in dict.fromkeys(row["system"] for row in rows):
            points = sorted((r["workers"], r["examples_per_sec"]) for r in rows if r["system"] == system)
            if SYSTEMS[system].kind == "limit":
                axis.axhline(points[0][1], linestyle="--", color="black", label=SYSTEMS[system].title)
            else:
                axis.plot(*zip(*points, strict=True), marker="o", label=SYSTEMS[system].title)
        axis.set_title(MODELS[model].title.split(" (")[0])
        axis.set_xlabel("workers")
        axis.set_ylabel("examples/s (median)")
        axis.set_xticks(sorted({row["workers"] for row in rows}))
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figures.save(figure, png, dpi=100)


def bench_on_links(plan, out):
    results = run_plan(plan, out, FLAGS.links)
    tables = {model: links_table_rows(model, results) for model in dict.fromkeys(model for model, _, _ in plan)}
    for model, rows in tables.items():
        lines = [LINKS_HEADER, *(_links_cells(row) for row in rows)]
        print(f"\n{MODELS[model].title}, on links\n" + "\n".join("  ".join(cells) for cells in lines))
    if FLAGS.report:
        write_report(FLAGS.report, links_markdown(tables, sys.argv[1:]), LINKS_BEGIN, LINKS_END)
        print(f"\nwrote {FLAGS.report}")
    print(f"\n[bench] the runs are in {out}")


def check_links_plan(plan, links):
    """ConfigError for a bad rate, or the one process (no network to shape) on a link."""
    for rate in links:
        bits_per_second(rate, "links")
    if links and any(SYSTEMS[system].kind == "limit" for _, system, _ in plan):
        raise ConfigError(
            "--links: the one process sends nothing over a network, so no link can slow it; leave "
            "process out of --systems"
        )


def links_table_rows(model, results):
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
            shape = (mode, sharing, summary["num_ps"] or 1, row["sent"], row["received"], bits_per_second(link))
            unshaped = medians[m, system, workers, UNSHAPED]
            bounds = (network_model.overlapped_ms, network_model.serial_ms)
            share = busiest_server_share(summary)
            row["predicted"] = tuple(bound(unshaped, *shape, server_share=share) for bound in bounds)
        rows.append(row)
    return rows


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
        _ratio(row["x_peer"]),
        "" if predicted is None else f"{predicted[0]:.2f}-{predicted[1]:.2f}",
        "" if predicted is None else outside_model(row),
        f"{row['sent'] / 1000:.1f}" if row["sent"] else "",
        f"{row['received'] / 1000:.1f}" if row["received"] else "",
    ]


def links_markdown(tables, argv):
    parts = [
        LINKS_BEGIN,
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine()}, by",
        "",
        "```bash\n" + " ".join(["python -m parallel_tf.bench", *shown_flags(argv)]) + "\n```",
        "",
        f"Repeats: {repeats()}, interleaved; median ms/step (steady state), spread min-max; x peer: throughput "
        "against TensorFlow's strategy of the same kind on the same link (above 1: faster). model ms: the network "
        "model's overlapped and serial bounds from the unshaped median and bytes (parallel_tf/tools/network_model.py;"
        " the peers do not count their bytes, so they have none); outside the model: how far the median lies below the"
        " overlapped bound or above the serial one, relative to that bound.",
    ]
    for model, rows in tables.items():
        parts += ["", f"### {MODELS[model].title}, {steps_of(model)} steps, on links", ""]
        lines = [LINKS_HEADER, ["---"] * len(LINKS_HEADER), *(_links_cells(row) for row in rows)]
        parts += ["\n".join("| " + " | ".join(cells) + " |" for cells in lines)]
    return "\n".join([*parts, LINKS_END])


def run_command_line():
    """`python -m parallel_tf.bench`."""
    define_bench_flags()
    hints = {
        name: "the bench runs every system on links with --links=100mbit,1gbit" for name in ("link_rate", "link_delay")
    }
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, command=__name__, hints=hints))
