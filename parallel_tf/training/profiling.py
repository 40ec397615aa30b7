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
"""

import json
import os
import re

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

KINDS = ("compute", "transfer", "wait", "update", "other")
TRANSFER = re.compile(r"^_(Host)?(Send|Recv)$|^RecvTensor$")
WAIT = re.compile(r"^Queue(Enqueue|Dequeue)")
UPDATE = re.compile(r"^(Apply|ResourceApply|Assign|Scatter|ResourceScatter)")


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


def _op_type(node):
    """A node's op type, as TF's timeline reads it: labels are 'name = Op(inputs)', except an RPC's."""
    if node.node_name == "RecvTensor":
        return "RecvTensor"
    match = re.match(r"(.*) = (.*)\((.*)\)", node.timeline_label)
    return match[2] if match else node.node_name


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
        options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
        result = sess.run(fetches, feed, options=options, run_metadata=metadata)
        trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
        name = f"trace_step_{step}" + (f"_{part}" if part else "")
        with open(os.path.join(self.logdir, f"{name}.json"), "w", encoding="utf-8") as f:
            f.write(trace)
        kinds, wall = breakdown(metadata.step_stats)
        with open(os.path.join(self.logdir, "trace_breakdown.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "part": part, "wall_ms": wall, "op_ms": kinds}) + "\n")
        spent = "  ".join(f"{kind} {ms:.2f}" for kind, ms in kinds.items())
        return result, f"traced step {step}: {wall:.2f} ms wall; op time (ms) {spent}"
