"""What the bench (bench.py) reports: each model's table printed, its targets, and --report's Markdown written
between its markers in place of the last (the prose around them survives a re-run), with its PNG; on links, the
tables beside the network model. Also how many repeats and steps the flags ask for, which the report states."""

import os
import sys
import time

from absl import flags

from parallel_tf.files import write_between
from parallel_tf.tools import bench_links
from parallel_tf.tools.bench_systems import MODELS
from parallel_tf.tools.bench_tables import machine, markdown_table, plot_throughput, table_rows, text_table
from parallel_tf.tools.bench_targets import target_lines

FLAGS = flags.FLAGS
QUICK_REPEATS = 2
BEGIN, END = "<!-- bench:begin (written by python -m parallel_tf.bench) -->", "<!-- bench:end -->"


def print_tables(plan, results):
    """Prints each model's table of `results`; returns them."""
    models = dict.fromkeys(model for model, _, _ in plan if any(key[0] == model for key in results))
    tables = {name: table_rows(name, results, FLAGS.global_batch_size) for name in models}
    for name, rows in tables.items():
        print(f"\n{heading(name)}, global batch {FLAGS.global_batch_size}")
        print(text_table(rows))
    return tables


def repeats():
    return QUICK_REPEATS if FLAGS.quick and not FLAGS["repeats"].present else FLAGS.repeats


def steps_of(model):
    if FLAGS["train_steps"].present:
        return FLAGS.train_steps
    return MODELS[model].quick_steps if FLAGS.quick else MODELS[model].train_steps


def report_markdown(tables, results, path):
    """The generated part of the report, between BEGIN and END; draws the PNG beside `path`."""
    png = os.path.splitext(path)[0] + ".png"
    plot_throughput(tables, png)
    tf_version = next(iter(results.values()))[0]["summary"]["tf_version"]
    parts = [
        BEGIN,
        *measured_by(f", TensorFlow {tf_version}"),
        f"Repeats: {repeats()}, interleaved; median ms/step over repeats (steady state: the logged "
        "intervals after the first), spread min-max; x limit, x peer and x floor are throughput ratios (above 1: "
        "faster); x floor: a parameter-server sync row against the floor of as many workers, each reading the "
        "parameters from the ps, computing its gradients and writing them back in one session run, with no "
        "gather, apply or wait (parallel_tf/tools/floor_task.py); run s: the median of the whole run's wall time, "
        "from its command to its exit, start-up included.",
    ]
    for model, rows in tables.items():
        parts += ["", f"### {heading(model)}, global batch {FLAGS.global_batch_size}", "", markdown_table(rows)]
    parts += ["", "### Targets", "", *target_lines(tables)]
    parts += ["", f"![throughput against worker count]({os.path.basename(png)})"]
    return "\n".join([*parts, END])


def measured_by(software=""):
    """A report's first lines: when, on what machine (and `software`), by which command."""
    command = " ".join(["python -m parallel_tf.bench", *shown_flags(sys.argv[1:])])
    return [
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine()}{software}, by",
        "",
        f"```bash\n{command}\n```",
        "",
    ]


def heading(model):
    return f"{MODELS[model].title}, {steps_of(model)} steps"


def shown_flags(argv):
    """The command's flags as the report shows them: where its runs went is of no use to a reader."""
    return [arg for arg in argv if not arg.startswith("--out=")]


def write_report(path, generated, begin=BEGIN, end=END):
    """`generated` in place of the old one between `begin` and `end` in `path` (files.write_between)."""
    write_between(path, generated, begin, end, new_file_title="# Benchmarks")


def report_links(plan, results, out):
    models = dict.fromkeys(model for model, _, _ in plan)
    tables = {model: bench_links.table_rows(model, results) for model in models}
    for model, rows in tables.items():
        print(f"\n{MODELS[model].title}, on links\n{bench_links.text(rows)}")
    if FLAGS.report:
        generated = bench_links.links_markdown(tables, measured_by(), repeats(), {m: heading(m) for m in models})
        write_report(FLAGS.report, generated, bench_links.LINKS_BEGIN, bench_links.LINKS_END)
        print(f"\nwrote {FLAGS.report}")
    print(f"\n[bench] the runs are in {out}")
