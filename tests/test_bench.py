"""The benchmark: its arithmetic on made-up timings (worked out by hand), its report, and one real
run beside TensorFlow's MultiWorkerMirroredStrategy on the same model. No timing is asserted."""

import json
import os
import re
import signal

import pytest
from conftest import REPO, bench_command
from inprocess import half_mean_square, scalar_dataset, scalar_recipe, start_cluster, train
from models import DIGITS, FLAGS, MLP

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.tools import bench, bench_links, bench_report, bench_tables, bench_targets, floor_task, runs
from parallel_tf.training import traffic

BATCH = 120


def result(ms, run_secs=1.0, steal=None):
    return {"ms_per_step": ms, "run_secs": run_secs, "steal": steal, "summary": {}, "logdir": ""}


RESULTS = {
    ("mlp", "process", 1): [result(1.0, 6.0, 0.01), result(1.2, 4.0, 0.23), result(0.8, 5.0, 0.0)],  # run 5.0 s
    ("mlp", "sync", 1): [result(4.0), result(5.0), result(3.0)],  # median 4.0
    ("mlp", "sync_step", 1): [result(5.0), result(5.0), result(5.0)],
    ("mlp", "mirrored", 1): [result(2.0), result(2.0), result(2.0)],
    ("mlp", "floor", 1): [result(3.0), result(3.5), result(2.5)],  # median 3.0
    ("mlp", "allreduce", 1): [result(1.5), result(1.5), result(1.5)],
}


def test_rows_give_medians_spreads_and_throughput_ratios():
    rows = {row["system"]: row for row in bench_tables.table_rows("mlp", RESULTS, BATCH)}
    sync = rows["sync"]
    assert (sync["ms"], sync["spread"]) == (4.0, (3.0, 5.0))
    assert sync["examples_per_sec"] == 1000.0 * 120 / 4.0 == 30000
    assert sync["x_limit"] == 1.0 / 4.0  # the one process does a step in a quarter of the time
    assert sync["x_peer"] == 2.0 / 4.0  # MultiWorkerMirroredStrategy's 2 ms against our 4
    assert sync["x_floor"] == 3.0 / 4.0  # the floor's 3 ms against our 4: the protocol beyond two crossings
    assert rows["mirrored"]["x_limit"] == 0.5 and rows["mirrored"]["x_peer"] is None
    assert rows["process"]["x_limit"] == 1.0
    assert rows["process"]["run_s"] == 5.0  # the whole run's wall time, its own median: 4, 5, 6 s
    # the one process against TensorFlow alone at its defaults (the peer on one worker): 2 ms against our 1
    assert rows["process"]["x_peer"] == 2.0
    # no peer in our kernels (mirrored_ours) ran: no same-kernels ratio
    assert sync["x_peer_same_kernels"] is None and rows["process"]["x_peer_same_kernels"] is None
    # only parameter-server sync is put against the floor: all-reduce has no ps, the floor no floor
    assert rows["allreduce"]["x_floor"] is None and rows["floor"]["x_floor"] is None
    assert rows["floor"]["x_peer"] is None
    # the most the hypervisor took of a CPU in any repeat, as a share and in the table; none read, none said
    assert rows["process"]["steal"] == 0.23 and rows["sync"]["steal"] is None
    cells = bench_tables.markdown_table([rows["process"], rows["sync"]]).splitlines()
    assert cells[0].endswith("| run s | steal |") and cells[2].endswith("| 5.0 | 23% |")
    assert cells[3].endswith("|  |")


def test_targets_say_met_or_by_how_much_missed():
    tables = {"mlp": bench_tables.table_rows("mlp", RESULTS, BATCH)}
    assert bench_targets.target_lines(tables) == [
        "- target mlp sync, ordered, a run a step, 1 worker(s): at least 0.8x parameter-server floor; measured 0.60x: "
        "missed by 0.20",
        "- target mlp all-reduce, 1 worker(s): at least 0.9x the one process; measured 0.67x: missed by 0.23",
    ]  # the 2-worker targets were not measured, so they are not claimed


def on_link(*ms, sent=0):
    return [
        {"ms_per_step": m, "summary": {"bytes_sent_per_step": sent, "bytes_received_per_step": sent, "num_ps": 0}}
        for m in ms
    ]


LINKED = {
    ("mlp", "allreduce", 2, bench_links.UNSHAPED): on_link(2.0, 2.0, 2.0, sent=38000),
    ("mlp", "allreduce", 2, "100mbit"): on_link(6.0, 5.0, 7.0, sent=38000),
    ("mlp", "mirrored", 2, bench_links.UNSHAPED): on_link(4.0, 4.0, 4.0),
    ("mlp", "mirrored", 2, "100mbit"): on_link(9.0, 9.0, 9.0),
}


def test_links_rows_compare_with_the_peer_on_the_same_link_and_bound_ours_by_the_model():
    rows = {(row["system"], row["link"]): row for row in bench_links.table_rows("mlp", LINKED)}
    shaped = rows["allreduce", "100mbit"]
    assert (shaped["ms"], shaped["spread"]) == (6.0, (5.0, 7.0))
    assert shaped["x_peer"] == 9.0 / 6.0 and rows["allreduce", bench_links.UNSHAPED]["x_peer"] == 4.0 / 2.0
    # 100 Mbit/s carries 1e8 / 8 * 1448/1514 bytes a second of TCP payload: 11.955 bytes a ms. The ring's
    # busier direction carries 38 KB (3.179 ms): the overlapped bound is the longer of that and the unshaped
    # 2 ms; the serial bound the unshaped step and both directions in turn.
    carried_ms = 38000 / (1e8 / 8 * 1448 / 1514 / 1000)
    assert shaped["predicted"] == pytest.approx((carried_ms, 2.0 + 2 * carried_ms))
    assert carried_ms == pytest.approx(3.179, abs=1e-3) and bench_links.outside_model(shaped) == "within"  # 6 ms
    peer = rows["mirrored", "100mbit"]
    assert peer["predicted"] is None and peer["x_peer"] is None  # the peers count no bytes to predict from
    assert bench_links._links_cells(peer)[5:] == ["", "", "", "", ""]  # no ratio, bounds or bytes to show
    # 5 ms one way: the ring of 2 waits on 2N = 4 one-way delays a step (network_model), 20 ms more on both bounds
    delayed = {**LINKED, ("mlp", "allreduce", 2, "100mbit/5ms"): on_link(16.0, 15.0, 17.0, sent=38000)}
    rows = {(row["system"], row["link"]): row for row in bench_links.table_rows("mlp", delayed)}
    assert rows["allreduce", "100mbit/5ms"]["predicted"] == pytest.approx((carried_ms + 20, 22.0 + 2 * carried_ms))


@pytest.mark.parametrize("steps_per_run, delays_ms", [({"steps_per_run": 10}, 30), (None, 25)])
def test_a_delayed_sync_row_counts_the_delays_of_its_steps_a_run(steps_per_run, delays_ms):
    """5 ms one way, nothing sent: in a loop of ten (summary.json's declared steps_per_run) a sync step waits on
    6 crossings, 30 ms, at one step a run (none declared) on 5, 25: both bounds, over the unshaped 4 ms."""
    summary = {"bytes_sent_per_step": 0, "bytes_received_per_step": 0, "num_ps": 1}
    summary["declared"] = {"steps_per_run": steps_per_run}
    runs = {
        ("mlp", "sync", 2, link): [{"ms_per_step": 4.0, "summary": summary}]
        for link in (bench_links.UNSHAPED, "100mbit/5ms")
    }
    (row,) = [row for row in bench_links.table_rows("mlp", runs) if row["link"] != bench_links.UNSHAPED]
    assert row["predicted"] == pytest.approx((delays_ms, 4.0 + delays_ms))


def test_steady_state_leaves_out_the_first_logged_interval(tmp_path):
    lines = [{"step": 10, "wall_time": 100.0}, {"step": 20, "wall_time": 100.5}, {"step": 30, "wall_time": 100.9}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert bench.steady_ms_per_step(tmp_path) == pytest.approx(1000.0 * 0.9 / 20)  # 45 ms, steps 10..30


def test_report_replaces_only_its_own_part(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    begin, end = bench_report.BEGIN, bench_report.END
    bench_report.write_report(str(path), f"{begin}\nfirst\n{end}")
    assert path.read_text() == f"# Benchmarks\n\n{begin}\nfirst\n{end}\n"
    path.write_text(f"# Ours\n\nprose before\n\n{begin}\nfirst\n{end}\n\nprose after\n")
    bench_report.write_report(str(path), f"{begin}\nsecond\n{end}")
    assert path.read_text() == f"# Ours\n\nprose before\n\n{begin}\nsecond\n{end}\n\nprose after\n"


def test_on_tensorflow_1_the_bench_skips_tensorflow_2_s_strategies_saying_so(monkeypatch, capsys):
    """The peers are TensorFlow 2's (tools/tf_strategies.py): on 1.15 each is left out with a line, and a run of
    peers alone is refused."""
    monkeypatch.setattr(bench.compat, "tensorflow_1", lambda: True)
    assert bench.runnable(["process", "mirrored", "parameter_server", "sync"]) == ["process", "sync"]
    assert capsys.readouterr().out.splitlines() == [
        "[bench] skipping mirrored: MultiWorkerMirroredStrategy (TensorFlow's defaults) is TensorFlow 2's, and this "
        "is TensorFlow 1.15",
        f"[bench] skipping parameter_server: {bench.SYSTEMS['parameter_server'].title} is TensorFlow 2's, and this "
        "is TensorFlow 1.15",
    ]
    with pytest.raises(ConfigError, match=r"--systems=mirrored: TensorFlow 2's own strategies, and this is"):
        bench.runnable(["mirrored"])


@pytest.mark.cluster
@pytest.mark.skipif(compat.tensorflow_1(), reason="the peers are TensorFlow 2's; the test above has 1.15's skip")
def test_bench_runs_the_peer_on_the_same_model_and_the_floor_with_its_bytes(procs, tmp_path):
    """The floor moves the MLP's real bytes: 64·128 + 128 + 128·10 + 10 = 9,610 floats, 38,440 bytes each way. The
    warm system's tasks are forked by the bench's warm server."""
    out, report = tmp_path / "runs", tmp_path / "BENCH.md"
    systems = "--systems=mirrored,mirrored_ours,floor,sync_warm"
    command = bench_command("--models=mlp", systems, "--workers=1", "--repeats=1", "--train_steps=20")
    run = procs.start([*command, f"--out={out}", f"--report={report}"])
    assert run.wait(300) == 0, run.output
    assert "[bench] 1/4: mlp, MultiWorkerMirroredStrategy (TensorFlow's defaults), 1 worker(s)" in run.output
    assert runs.forked_by_warm_server(out / "mlp-sync_warm-1w-r1.log")
    assert not runs.forked_by_warm_server(out / "mlp-floor-1w-r1.log")
    defaults, ours = (
        runs.read_json(out / f"mlp-{system}-1w-r1" / "summary.json") for system in ("mirrored", "mirrored_ours")
    )
    assert (defaults["at_tensorflows_defaults"], defaults["kernels"]) == (True, "fast")
    assert (ours["at_tensorflows_defaults"], ours["kernels"]) == (False, "portable")
    assert run.lines[-1] == f"[bench] the runs (summary.json, metrics.jsonl, each run's logs) are in {out}"
    assert any(
        re.match(r"MultiWorkerMirroredStrategy \(TensorFlow's defaults\) +1 +[0-9.]+ ", line) for line in run.lines
    )
    text = report.read_text()
    assert bench_report.BEGIN in text and "| MultiWorkerMirroredStrategy, our kernels | 1 |" in text
    floor = runs.read_json(out / "mlp-floor-1w-r1" / "summary.json")
    assert (floor["bytes_sent_per_step"], floor["bytes_received_per_step"]) == (38440, 38440)
    assert re.search(r"\| parameter-server floor \| 1 \| [0-9.]+ \|.*\| 38\.4 \| 38\.4 \|", text), text
    assert (tmp_path / "BENCH.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Same model, initial values, data order and batch: one mirrored worker in our kernels trains what the one
    # process does (here against an in-process one-process run, which the elastic test in test_clusters.py also
    # uses); at TensorFlow's defaults, the same up to its kernels' rounding.
    train(MLP, DIGITS, tmp_path / "reference", "single", **{**FLAGS, "train_steps": 20})
    assert runs.max_param_difference(tmp_path / "reference", out / "mlp-mirrored_ours-1w-r1") <= 1e-6
    assert runs.max_param_difference(tmp_path / "reference", out / "mlp-mirrored-1w-r1") <= 1e-5


@pytest.mark.cluster
def test_ctrl_c_stops_the_bench_with_the_table_of_the_runs_finished_so_far(procs, tmp_path):
    """docs/benchmark.md: Ctrl-C stops the bench and the run under way (exit 130); the runs already finished stay,
    and their table is printed: here the first of two repeats of the one process."""
    out = tmp_path / "runs"
    command = bench_command("--models=mlp", "--systems=process", "--workers=1", "--repeats=2", "--train_steps=30")
    run = procs.start([*command, f"--out={out}"])
    run.wait_for_line(r"^\[bench\] 2/2: ", 120)
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.wait(30) == 128 + signal.SIGINT
    table = run.output.split("[bench] interrupted; the tables of the runs finished so far:")[1]
    assert re.search(r"^one process \(the limit\) +1 +[0-9.]+ ", table, re.M), run.output
    assert run.lines[-1] == f"[bench] interrupted; the runs finished so far are in {out}"
    assert (out / "mlp-process-1w-r1" / "summary.json").exists() and "Traceback" not in run.output


@pytest.mark.inprocess
def test_a_floor_step_writes_the_workers_gradient_next_to_the_parameters_and_applies_nothing():
    """Worker 1 of 2, w = 1, its example x = 5: the gradient of ½(x − w)² is w − x = −4, written into row 1
    of w's slots on the ps, crossing each way once (w down, the gradient up); row 0 and w stay as they were."""
    _, servers = start_cluster(num_ps=1, num_workers=2)
    with tf.Graph().as_default():
        model, write = floor_task.floor_step(scalar_recipe(half_mean_square, 1.0), scalar_dataset(3, 5), 1, 2)
        (slots,) = [v for v in tf.global_variables() if v.op.name.endswith("_gradient_slots")]
        (w,) = tf.trainable_variables()
        assert slots.device == w.device == "/job:ps/task:0/device:CPU:0"
        assert traffic.step_bytes(write, ("worker", 1)) == (4, 4)
        with tf.Session(servers[("worker", 1)].target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(write, {model.features: [[5.0]], model.labels: [5]})
            assert sess.run(slots).tolist() == [[0.0], [-4.0]]
            assert sess.run(w).tolist() == [1.0]


def test_the_readmes_floor_example_compares_rows_the_floor_is_compared_with():
    """The floor is one session run a step; a row of k steps a run can go below it, so its `x floor` is left empty
    (bench_tables.rows): the README's "against its floor" names only rows of one run a step."""
    (line,) = [line for line in (REPO / "README.md").read_text().splitlines() if "against its floor" in line]
    systems = re.search(r"--systems=(\S+)", line)[1].split(",")
    assert "floor" in systems
    for name in set(systems) - {"floor"}:
        assert (bench.SYSTEMS[name].mode, bench.SYSTEMS[name].steps_per_run) == ("sync", 1), name


def test_a_link_of_the_bench_is_a_rate_and_maybe_a_one_way_delay():
    assert bench_links.parsed("100mbit") == ("100mbit", 0.0)
    assert bench_links.parsed("1gbit/1.5ms") == ("1gbit", 1.5)
    assert bench_links.link_flags("100mbit/25ms") == ["--link_rate=100mbit", "--link_delay=25"]
    assert bench_links.link_flags("1gbit") == ["--link_rate=1gbit"]
    with pytest.raises(ConfigError, match=r"^--links=100mbit/25: a delay is milliseconds one way after the rate"):
        bench_links.parsed("100mbit/25")
