"""A step profile: --trace_steps=a:b records TensorFlow's step stats for the chief's steps a..b-1.

For each traced step the chief writes `trace_step_<n>.json` into the logdir (Chrome's trace format:
open it in chrome://tracing or Perfetto) and logs where the step's time went. The breakdown adds
up op times by kind, on every task the step touched; ops run in parallel, so the kinds can add up
to more than the step's wall time, which is logged beside them.

    compute    the model's ops on a worker or the one process (forward, backward, encoding)
    transfer   sends and receives between tasks
    wait       queue operations: the barriers, the release, token queues
    update     applying, assigning and scattering into variables (mostly on parameter servers)
    other      the rest (reads, identities, constants) on parameter servers

It also lists the step's cross-task edges, from the partition graphs TensorFlow ran
(RunOptions.output_partition_graphs): each tensor one task received from another is one RecvTensor
RPC, a round the step may wait on. An edge is "data" when an op reads the value, "control" when it
only orders ops (TensorFlow still sends a tensor for it); its bytes are the size of the tensor sent.
`partition_edges` in trace_breakdown.jsonl lists them, and the log line counts them.

In a pipelined sync step (--pipeline_pieces, graph/pipeline.py) `pieces` gives each piece's moments, in ms from
the step's first op: `sent`, the chief's vector of its gradients made; `landed`, that vector split on the server;
`all_in`, every worker's arrival taken; `applied`, its update done; `pulled`, the chief's copy of it assigned.
"""

import collections
import dataclasses
import json
import os
import re

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

KINDS = ("compute", "transfer", "wait", "update", "other")
RECV_OPS, SEND_OPS = ("_Recv", "_HostRecv"), ("_Send", "_HostSend")
TASK = re.compile(r"/job:([^/]+)/(?:replica:\d+/)?task:(\d+)")
TRANSFER = re.compile(r"^_(Host)?(Send|Recv)$|^RecvTensor$|^Collective")  # a collective: waiting and moving
WAIT = re.compile(r"^Queue(Enqueue|Dequeue)")
UPDATE = re.compile(r"^(Apply|ResourceApply|Assign|Scatter|ResourceScatter)")
PIECE = re.compile(r"(parallel_tf_pipeline_\d+_\d+)/")  # the name scope of a piece's ops (graph/pipeline.py)


def parse_steps(text):
    """(first, end) from --trace_steps=a:b (steps a..b-1), None for ''; ConfigError otherwise."""
    if not text:
        return None
    first, sep, end = text.partition(":")
    if not (sep and first.isdigit() and end.isdigit() and int(first) < int(end)):
        raise ConfigError(f"--trace_steps={text}: expected FIRST:END with FIRST < END, e.g. 10:13")
    return int(first), int(end)


def kind_of(op_type, device):
    if TRANSFER.match(op_type):
        return "transfer"
    if WAIT.match(op_type):
        return "wait"
    if UPDATE.match(op_type):
        return "update"
    return "other" if re.search(r"/job:(ps|local_ps)/", device) else "compute"  # a worker, or the one process


def breakdown(step_stats):
    """{kind: milliseconds of op time} and the step's wall milliseconds, from a RunMetadata's step stats."""
    totals = dict.fromkeys(KINDS, 0.0)
    starts, ends = [], []
    for device in step_stats.dev_stats:
        for node in device.node_stats:
            op_type = _op_type(node)
            totals[kind_of(op_type, device.device)] += node.all_end_rel_micros / 1000.0
            starts.append(node.all_start_micros)
            ends.append(node.all_start_micros + node.all_end_rel_micros)
    wall = (max(ends) - min(starts)) / 1000.0 if starts else 0.0
    return {kind: round(ms, 3) for kind, ms in totals.items()}, round(wall, 3)


def piece_times(step_stats):
    """{piece: {moment: ms from the step's first op}} of a pipelined step (see above); {} for another."""
    nodes = [(device.device, node) for device in step_stats.dev_stats for node in device.node_stats]
    first = min((node.all_start_micros for _, node in nodes), default=0)
    pieces: dict = collections.defaultdict(dict)
    for device, node in nodes:
        piece, moment = PIECE.search(node.node_name), _moment(_op_type(node), "/job:worker/" in device)
        if not (piece and moment):
            continue
        start = (node.all_start_micros - first) / 1000.0
        if moment == "landed":  # the first of a landing; the last op of every other moment
            at = min(pieces[piece[1]].get(moment, start), start)
        else:
            at = max(pieces[piece[1]].get(moment, 0.0), start + node.all_end_rel_micros / 1000.0)
        pieces[piece[1]][moment] = round(at, 3)
    return dict(pieces)


def _moment(op_type, on_worker):
    """Which of a piece's moments an op of it marks: the end of the last of its kind, the start of a landing."""
    if on_worker:
        return {"ConcatV2": "sent", "Assign": "pulled"}.get(op_type)
    if op_type == "QueueDequeueManyV2":
        return "all_in"
    if op_type.startswith(("Apply", "ResourceApply")):
        return "applied"
    return "landed" if op_type == "SplitV" else None


def _op_type(node):
    """A node's op type, as TF's timeline reads it: labels are 'name = Op(inputs)', except an RPC's."""
    if node.node_name == "RecvTensor":
        return "RecvTensor"
    match = re.match(r"(.*) = (.*)\((.*)\)", node.timeline_label)
    return match[2] if match else node.node_name


@dataclasses.dataclass(frozen=True)
class Edge:
    sender: str  # "job:task"
    receiver: str
    tensor: str  # TensorFlow's name for the edge: edge_<n>_<the producing op>
    kind: str  # "data" or "control"
    bytes: int


def cross_task_edges(partition_graphs, step_stats):
    """The step's Edges between tasks: one per receive whose sender is on another task."""
    sent_bytes = _sent_bytes(partition_graphs, step_stats)
    edges = []
    for graph in partition_graphs:
        uses = _uses(graph)
        for node in graph.node:
            if node.op not in RECV_OPS:
                continue
            sender, receiver = (_task(node.attr[end].s.decode()) for end in ("send_device", "recv_device"))
            if sender != receiver:
                kind = "data" if _read_as_data(node.name, uses) else "control"
                tensor = node.attr["tensor_name"].s.decode()
                edges.append(Edge(sender, receiver, tensor, kind, sent_bytes.get(tensor, 0)))
    return edges


def _sent_bytes(partition_graphs, step_stats):
    """{edge's tensor: its size}, from the sender's record of the output its _Send took. Not from the RPC's
    own log: TensorFlow turns RPC logging on with an asynchronous request, best effort, so a receive issued
    at a traced step's start can go unlogged (a sync step's gradient on the ps did, now and then)."""
    output_bytes = {
        (device.device, node.node_name, output.slot): output.tensor_description.allocation_description.requested_bytes
        for device in step_stats.dev_stats
        for node in device.node_stats
        for output in node.output
    }
    sent = {}
    for graph in partition_graphs:
        for node in graph.node:
            if node.op in SEND_OPS:
                name, _, slot = node.input[0].partition(":")
                key = (node.attr["send_device"].s.decode(), name, int(slot or 0))
                sent[node.attr["tensor_name"].s.decode()] = output_bytes.get(key, 0)
    return sent


def _uses(graph):
    """{node name: [(consumer node, True for a data input)]} within one partition."""
    uses = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            uses[name.lstrip("^").split(":")[0]].append((node, not name.startswith("^")))
    return uses


def _read_as_data(name, uses):
    """Whether some op reads the value received as `name`: through identities, which only forward it."""
    return any(
        as_data and (consumer.op != "Identity" or _read_as_data(consumer.name, uses))
        for consumer, as_data in uses[name]
    )


def _task(device):
    match = TASK.search(device)
    assert match, device  # a step's devices are its tasks'
    return f"{match[1]}:{match[2]}"


def count_edges(edges):
    """'N cross-task edges (D data, C control), K KB' for a log line."""
    data = sum(edge.kind == "data" for edge in edges)
    kilobytes = sum(edge.bytes for edge in edges) / 1000
    return f"{len(edges)} cross-task edges ({data} data, {len(edges) - data} control), {kilobytes:.1f} KB"


class StepTracer:
    """Runs the steps of `steps` (first, end) with a full trace and writes what it saw into `logdir`."""

    def __init__(self, steps, logdir):
        self.steps, self.logdir = steps, logdir

    def wants(self, step):
        return self.steps is not None and self.steps[0] <= step < self.steps[1]

    def run(self, sess, step, fetches, feed, part=0):
        """sess.run with a full trace; writes trace_step_<step>.json (<step>_<part> for a step's later
        runs, e.g. an async fetch then the step) and returns (result, the breakdown's log line)."""
        from tensorflow.python.client import timeline  # TF's own trace writer (in 1.15 too); only when tracing

        metadata = tf.RunMetadata()
        options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE, output_partition_graphs=True)
        result = sess.run(fetches, feed, options=options, run_metadata=metadata)
        trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
        name = f"trace_step_{step}" + (f"_{part}" if part else "")
        with open(os.path.join(self.logdir, f"{name}.json"), "w", encoding="utf-8") as f:
            f.write(trace)
        kinds, wall = breakdown(metadata.step_stats)
        edges = cross_task_edges(metadata.partition_graphs, metadata.step_stats)
        line = {"step": step, "part": part, "wall_ms": wall, "op_ms": kinds}
        line["partition_edges"] = [dataclasses.asdict(edge) for edge in edges]
        pieces = piece_times(metadata.step_stats)
        line.update({"pieces": pieces} if pieces else {})
        with open(os.path.join(self.logdir, "trace_breakdown.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        spent = "  ".join(f"{kind} {ms:.2f}" for kind, ms in kinds.items())
        return result, f"traced step {step}: {wall:.2f} ms wall; op time (ms) {spent}; {count_edges(edges)}"
