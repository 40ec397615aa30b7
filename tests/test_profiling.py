"""--trace_steps: the chief's traced steps as Chrome traces, and where their time went."""

import json

import pytest
from inprocess import half_mean_square, scalar_dataset, scalar_recipe, train

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.training import profiling


@pytest.mark.parametrize("text", ["5", "5:5", "7:3", "a:b", ":4"])
def test_bad_step_ranges_are_refused(text):
    with pytest.raises(ConfigError, match=f"--trace_steps={text}: expected FIRST:END with FIRST < END"):
        profiling.parse_steps(text)


@pytest.mark.parametrize(
    "op_type, device, kind",
    [
        ("MatMul", "/job:worker/replica:0/task:1/device:CPU:0", "compute"),
        ("MatMul", "/job:localhost/replica:0/task:0/device:CPU:0", "compute"),
        ("Identity", "/job:local_ps/replica:0/task:1/device:CPU:0", "other"),
        ("_Recv", "/job:ps/replica:0/task:0/device:CPU:0", "transfer"),
        ("CollectiveReduce", "/job:worker/replica:0/task:1/device:CPU:0", "transfer"),
        ("QueueDequeueManyV2", "/job:ps/replica:0/task:0/device:CPU:0", "wait"),
        ("ApplyGradientDescent", "/job:ps/replica:0/task:0/device:CPU:0", "update"),
        ("Identity", "/job:ps/replica:0/task:0/device:CPU:0", "other"),
    ],
)
def test_ops_are_sorted_by_what_they_do(op_type, device, kind):
    assert profiling.kind_of(op_type, device) == kind


def test_a_pipelined_step_s_pieces_are_timed_from_the_ops_of_their_name_scopes():
    """The step starts with its first op, at 1,000 µs. The piece was sent when the chief's concat of it ended
    (2,000 + 500: 1.5 ms), landed when the first split on its server started (4,000: 3.0; the later one and the
    pull's split on the worker do not count), was all in when the take of every arrival ended (5,000 + 1,000:
    5.0), applied when its last update ended (6,000 + 250: 5.25), pulled when the chief's last assign ended
    (7,000 + 1,000: 7.0)."""
    metadata = tf.RunMetadata()
    worker = metadata.step_stats.dev_stats.add(device="/job:worker/replica:0/task:0/device:CPU:0")
    server = metadata.step_stats.dev_stats.add(device="/job:ps/replica:0/task:1/device:CPU:0")
    piece = "parallel_tf_pipeline_0_1/"
    for device, name, op_type, start, micros in [
        (worker, "model/MatMul", "MatMul", 1000, 500),
        (worker, piece + "concat", "ConcatV2", 2000, 500),
        (server, piece + "split", "SplitV", 4000, 100),
        (server, piece + "split_1", "SplitV", 4200, 100),
        (server, piece + "parallel_tf_pipeline_0_1_DequeueMany", "QueueDequeueManyV2", 5000, 1000),
        (server, piece + "GradientDescent/update_a/ApplyGradientDescent", "ApplyGradientDescent", 6000, 250),
        (server, piece + "GradientDescent/update_b/ApplyGradientDescent", "ApplyGradientDescent", 6100, 100),
        (worker, piece + "split_2", "SplitV", 7000, 10),
        (worker, piece + "Assign", "Assign", 7000, 1000),
        (worker, piece + "Assign_1", "Assign", 7500, 200),
    ]:
        device.node_stats.add(
            node_name=name, all_start_micros=start, all_end_rel_micros=micros, timeline_label=f"{name} = {op_type}(x)"
        )
    assert profiling.piece_times(metadata.step_stats) == {
        "parallel_tf_pipeline_0_1": {"sent": 1.5, "landed": 3.0, "all_in": 5.0, "applied": 5.25, "pulled": 7.0}
    }


@pytest.mark.inprocess
def test_a_traced_pipelined_step_says_when_each_piece_moved_in_the_order_it_must(tmp_path):
    """One parameter, so one piece: the chief sends it, it lands, every arrival is taken, it is applied and only
    then pulled, as the dataflow of graph/pipeline.py orders them (one process's clock for every task)."""
    recipe, data = scalar_recipe(half_mean_square, 0.0), scalar_dataset(1, 3)
    train(recipe, data, tmp_path, "sync", pipeline_pieces=2, trace_steps=(1, 2))
    (line,) = [json.loads(line) for line in (tmp_path / "trace_breakdown.jsonl").read_text().splitlines()]
    (times,) = line["pieces"].values()
    assert sorted(times, key=times.get) == ["sent", "landed", "all_in", "applied", "pulled"]


@pytest.mark.inprocess
def test_traced_sync_steps_write_chrome_traces_and_a_breakdown(tmp_path):
    """Steps 1 and 2 of 3, two workers: two traces, each with events on the worker and the ps, and a
    breakdown in which the chief computed, waited at the barrier and sent or received."""
    train(scalar_recipe(half_mean_square, 0.0), scalar_dataset(1, 3), tmp_path, "sync", trace_steps=(1, 3))
    assert sorted(p.name for p in tmp_path.glob("trace_step_*.json")) == ["trace_step_1.json", "trace_step_2.json"]
    events = json.loads((tmp_path / "trace_step_1.json").read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert any("/job:worker" in p for p in processes) and any("/job:ps" in p for p in processes)
    lines = [json.loads(line) for line in (tmp_path / "trace_breakdown.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert line["wall_ms"] > 0 and set(line["op_ms"]) == set(profiling.KINDS)
        assert line["op_ms"]["compute"] > 0 and line["op_ms"]["wait"] > 0 and line["op_ms"]["transfer"] > 0


def edges(line):
    return sorted((e["sender"], e["receiver"], e["kind"]) for e in line["partition_edges"])


UP, DOWN = ("worker:0", "ps:0"), ("ps:0", "worker:0")


@pytest.mark.inprocess
def test_a_sync_step_crosses_tasks_only_where_the_algorithm_must(tmp_path):
    """The chief of two workers, one parameter w, one run a step, from the partitions TensorFlow ran: w down
    (4 bytes); its gradient and its loss up as one vector (4 + 4); the report down as one vector, every
    worker's index and loss (2 · 4 + 2 · 4), made on the ps once the update is applied and the others are
    released, so no control edge comes back. Nothing else: the learning rate, the slot's index and the
    barrier's constants are made on the ps, and each tensor crosses once (graph/server_vectors.py: one RecvTensor
    each way per ps). A change that adds a round shows here."""
    train(scalar_recipe(half_mean_square, 0.0), scalar_dataset(1, 3), tmp_path, "sync", trace_steps=(1, 2))
    (line,) = [json.loads(line) for line in (tmp_path / "trace_breakdown.jsonl").read_text().splitlines()]
    assert edges(line) == sorted([(*DOWN, "data")] * 2 + [(*UP, "data")])
    assert sorted(e["bytes"] for e in line["partition_edges"]) == [4, 8, 16]


FETCH = [(*DOWN, "data")] * 2  # w, and the global step it reflects
PUSH = [(*UP, "data")] * 2 + [(*DOWN, "control")]  # the global step read at the fetch, the sum; done


@pytest.mark.inprocess
@pytest.mark.parametrize("prefetch, runs", [(True, [FETCH + PUSH]), (False, [FETCH, PUSH])])
def test_an_async_step_pushes_and_fetches_with_one_edge_back(tmp_path, prefetch, runs):
    """The chief of two workers, one parameter: its fetch takes w and the global step down; its push sends
    the global step it read and its gradient sum up, and one control edge comes back once the update and
    the push's counters are applied (the rate, the histogram's bin and the counters' constants are made
    on the ps). With --prefetch the next step's fetch ends the same run, its reads waiting on the ps for
    the update: one run, no more edges."""
    recipe, data = scalar_recipe(half_mean_square, 0.0), scalar_dataset(1, 3)
    train(recipe, data, tmp_path, "async", trace_steps=(1, 2), prefetch=prefetch)
    traced = [json.loads(line) for line in (tmp_path / "trace_breakdown.jsonl").read_text().splitlines()]
    assert [edges(line) for line in traced] == [sorted(run) for run in runs]


@pytest.mark.inprocess
def test_an_allreduce_step_crosses_no_task_edge_and_spends_its_wait_in_the_collective(tmp_path):
    """Workers only: a step's graph stays on its worker, and what the worker waits for and sends is the
    one all-reduce op, counted as a transfer."""
    train(scalar_recipe(half_mean_square, 0.0), scalar_dataset(1, 3), tmp_path, "allreduce", trace_steps=(1, 2))
    (line,) = [json.loads(line) for line in (tmp_path / "trace_breakdown.jsonl").read_text().splitlines()]
    assert line["partition_edges"] == []
    assert line["op_ms"]["transfer"] > 0 and line["op_ms"]["wait"] == 0
