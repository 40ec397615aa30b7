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
what the chief sends and receives per step, and the most of a CPU's time the hypervisor took in any repeat
(steal: a row it slowed shows it; training/cpu_steal.py). --report writes the tables, the targets and a PNG of
throughput against worker count into a Markdown file, between markers, so the prose around them
survives a re-run.
"""

import json
import os
import sys
import time

from absl import app, flags

from parallel_tf import compat
from parallel_tf.cli import exit_config_error, parse_flags_or_exit, positive_ints
from parallel_tf.errors import ConfigError
from parallel_tf.files import write_atomically
from parallel_tf.launch import forkserver
from parallel_tf.launch.launcher import resolve_recipe
from parallel_tf.tools import bench_links, runs
from parallel_tf.tools.bench_report import print_tables, repeats, report_links, report_markdown, steps_of, write_report
from parallel_tf.tools.bench_systems import FULL_RUN, MODELS, ON_LINKS, STARTS, SYSTEMS, TECHNIQUES_IN_THE_LOOP
from parallel_tf.tools.bench_tables import (
    print_profile,
)
from parallel_tf.tools.bench_targets import QUICK_PLAN, target_lines
from parallel_tf.training import cpu_steal, profiling, run_check, run_flags
from parallel_tf.training.logdir import BENCH, prepare_logdir

FLAGS = flags.FLAGS
MIN_STEPS = 10  # logged every tenth of the run, and the first interval left out


def define_bench_flags():
    flags.DEFINE_list("models", list(MODELS), f"Models to run: {', '.join(MODELS)}.")
    flags.DEFINE_list(
        "systems",
        list(FULL_RUN),
        f"Systems to run: {', '.join(SYSTEMS)}. Default: all but the ways of talking less ({', '.join(ON_LINKS)}), "
        f"which pay only on a link (--links), the techniques in the loop against a run a step "
        f"({', '.join(TECHNIQUES_IN_THE_LOOP)}), and other ways of starting the tasks ({', '.join(STARTS)}).",
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
        "each a rate and, after a slash, a one-way delay (100mbit/25ms), beside the network model's prediction "
        "(tools/network_model.py): its own tables in the report.",
    )
    run_flags.define_run_flags()
    run_flags.define_dry_run_flag("how many runs it plans")


def main(argv):
    if len(argv) > 1:
        exit_config_error(f"unexpected argument {argv[1]!r}; flags look like --name=value")
    try:
        plan = make_plan()
        profiling.parse_steps(FLAGS.trace_steps)
        bench_links.check_plan(plan, FLAGS.links)
        out = runs.out_dir(FLAGS.out, "bench")
        runs_planned = repeats() * len(plan) * (1 + len(FLAGS.links))
        if FLAGS.dry_run:
            print(f"[bench] --dry_run: {runs_planned} runs planned ({len(plan)} a repeat), into {out}; none started")
            return
        prepare_logdir(out, BENCH)
    except ConfigError as e:
        exit_config_error(str(e))
    write_atomically(
        os.path.join(out, BENCH.finished), json.dumps({"command": sys.argv, "plan": plan, "repeats": repeats()}) + "\n"
    )
    print(f"[bench] {runs_planned} runs planned, into {out}", flush=True)
    results: dict = {}
    try:
        run_plan(plan, out, results, FLAGS.links)
    except KeyboardInterrupt:  # the run under way gets the same Ctrl-C and stops its own tasks
        finished = {key: measured for key, measured in results.items() if measured}
        if finished and not FLAGS.links:
            print("\n[bench] interrupted; the tables of the runs finished so far:")
            print_tables(plan, finished)
        print(f"\n[bench] interrupted; the runs finished so far are in {out}", file=sys.stderr)
        sys.exit(130)
    if FLAGS.links:
        return report_links(plan, results, out)
    tables = print_tables(plan, results)
    print("\n" + "\n".join(target_lines(tables)))
    if FLAGS.trace_steps:
        print_profile(results)
    if FLAGS.report:
        write_report(FLAGS.report, report_markdown(tables, results, FLAGS.report))
        print(f"\nwrote {FLAGS.report}")
    print(f"\n[bench] the runs (summary.json, metrics.jsonl, each run's logs) are in {out}")


def make_plan():
    """[(model, system, workers)], in the order of one repeat; ConfigError for unknown names."""
    for flag_name, known in (("models", MODELS), ("systems", SYSTEMS)):
        unknown = [name for name in FLAGS[flag_name].value or () if name not in known]
        if unknown:
            raise ConfigError(f"--{flag_name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if steps_of(FLAGS.models[0]) < MIN_STEPS:
        raise ConfigError(
            f"--train_steps={FLAGS.train_steps}: the bench needs at least {MIN_STEPS} to see a steady state"
        )
    warm = [name for name in FLAGS.systems if SYSTEMS[name].warm]
    if warm and not forkserver.SUPPORTED:
        raise ConfigError(f"--systems={warm[0]}: a warm fork server forks tasks on Linux only")
    workers = positive_ints("workers", FLAGS.workers)
    for count in workers:
        if FLAGS.global_batch_size % count:
            raise ConfigError(f"--workers: {count} does not divide --global_batch_size={FLAGS.global_batch_size}")
    plan = []
    for model in FLAGS.models:
        for name in runnable(FLAGS.systems):
            system = SYSTEMS[name]
            counts = [1] if system.kind == "limit" else [n for n in workers if n >= system.min_workers]
            plan += [(model, name, n) for n in counts]
    return [key for key in QUICK_PLAN if key in plan] if FLAGS.quick else plan


def runnable(systems):
    """`systems` less TensorFlow 2's own strategies on TensorFlow 1.x (the peers have no 1.x form), each skipped with
    a line saying so; ConfigError where nothing is left."""
    if not compat.tensorflow_1():
        return systems
    peers = [name for name in systems if SYSTEMS[name].strategy in TENSORFLOW_2_PEERS]
    for name in peers:
        print(f"[bench] skipping {name}: {SYSTEMS[name].title} is TensorFlow 2's, and this is TensorFlow 1.15")
    left = [name for name in systems if name not in peers]
    if not left:
        raise ConfigError(f"--systems={','.join(systems)}: TensorFlow 2's own strategies, and this is TensorFlow 1.15")
    return left


TENSORFLOW_2_PEERS = ("mirrored", "parameter_server")  # tools/tf_strategies.py: TensorFlow 2's strategies


def run_plan(plan, out, results, links=()):
    """Fills `results`, {(model, system, workers): [result per repeat]}, as the runs finish (an interrupted bench
    keeps what it measured): each result has ms_per_step, the run's summary and logdir. With `links`, the keys end
    with the link: every (model, system, workers) unshaped, then on each link."""
    keys = [(*key, link) for key in plan for link in (bench_links.UNSHAPED, *links)] if links else plan
    results.update({key: [] for key in keys})
    with runs.warm_server(any(SYSTEMS[system].warm for _, system, _ in plan), "bench") as warm_server:
        _run_keys(keys, out, results, warm_server)


def _run_keys(keys, out, results, warm_server):
    started = time.time()
    total = repeats() * len(keys)
    for repeat in range(repeats()):
        for index, key in enumerate(keys):
            model, system, workers, *link = key
            named = [text.replace("/", "-") for text in link]  # 100mbit/25ms: 100mbit-25ms
            logdir = os.path.join(out, "-".join([model, system, f"{workers}w", *named, f"r{repeat + 1}"]))
            done = repeat * len(keys) + index
            eta = "" if not done else f", about {(time.time() - started) / done * (total - done) / 60:.1f} min left"
            on_link = f", link {link[0]}" if link else ""
            print(
                f"[bench] {done + 1}/{total}: {model}, {SYSTEMS[system].title}, {workers} worker(s){on_link}{eta}",
                flush=True,
            )
            command, given = command_for(model, system, workers)
            shaped = [flag for text in link if text != bench_links.UNSHAPED for flag in bench_links.link_flags(text)]
            launched = time.time()
            try:
                warm = warm_server if SYSTEMS[system].warm else None
                with cpu_steal.Stolen() as stolen:  # the peers' runs too, which record none of their own
                    summary = runs.run(
                        command,
                        logdir,
                        [*given, *shaped],
                        log_path=logdir + ".log",
                        warm_server=warm,
                        environment=SYSTEMS[system].environment,
                    )
            except runs.RunFailed as e:
                print(
                    f"error: {model}, {system} with {workers} worker(s){on_link} {e}\n(full output: {logdir}.log)",
                    file=sys.stderr,
                )
                sys.exit(1)
            if warm and not runs.forked_by_warm_server(logdir + ".log"):
                print(
                    f"error: {model}, {system} with {workers} worker(s): its tasks were not forked by the warm "
                    f"server (see {logdir}.log)",
                    file=sys.stderr,
                )
                sys.exit(1)
            measured = {
                "ms_per_step": steady_ms_per_step(logdir),
                "run_secs": time.time() - launched,
                "steal": stolen.share,
            }
            results[key].append({**measured, "summary": summary, "logdir": logdir})


def command_for(model_name, system_name, workers):
    """(command, flags) of one run: the limit, one of our clusters, or a peer."""
    model, system = MODELS[model_name], SYSTEMS[system_name]
    recipe = resolve_recipe(model.recipe)
    steps = steps_of(model_name)
    given = [flag for flag in run_check.given_task_flags(run_check.NO_CLUSTER) if not flag.startswith("--train_steps=")]
    per_run = system.steps_per_run or 1
    log_every = -(-max(1, steps // 10) // per_run) * per_run  # a tenth of the run, in whole runs of steps
    run_flags = [f"--train_steps={steps}", f"--log_every={log_every}", *model.flags, *given]
    if system.strategy:  # the peers trace nothing and save nothing
        command = [sys.executable, "-m", "parallel_tf.tools.tf_strategies", f"--strategy={system.strategy}"]
        run_flags = [flag for flag in run_flags if not flag.startswith("--trace_steps")]
        return [*command, f"--num_workers={workers}", f"--recipe={recipe}", *system.flags], run_flags
    # Ours checkpoint only at the end, unless told otherwise: a save inside the measured steps would count.
    run_flags = ["--checkpoint_every=0", *run_flags]
    loop = [f"--steps_per_run={per_run}"] if system.steps_per_run else []
    if system.kind == "limit":
        return runs.single_process_command(recipe), [*run_flags, *system.flags, *loop]
    servers = [f"--num_ps={workers}"] if system.ps_per_worker else []
    return runs.cluster_command(recipe, system.mode, workers, *servers), [*run_flags, *system.flags, *loop]


def steady_ms_per_step(logdir):
    """ms/step over the logged intervals after the first: the steady state, without start-up and warm-up."""
    first, *_, last = runs.read_metrics(logdir)
    return 1000.0 * (last["wall_time"] - first["wall_time"]) / (last["step"] - first["step"])


def run_command_line():
    """`python -m parallel_tf.bench`."""
    define_bench_flags()
    hints = {
        name: "the bench runs every system on links with --links=100mbit,1gbit/1ms"
        for name in ("link_rate", "link_delay", "link_loss")
    }
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, command=__name__, hints=hints))
