"""Bytes a worker sends and receives per step, from the tensors of its step that cross tasks.

TensorFlow partitions a step's graph by device and adds a send and a receive for every tensor an
op on one task consumes from another (once per tensor and receiving task). This walks the same
subgraph (what the step's fetches need, through inputs and control inputs) and adds up the static
sizes of the tensors whose producer and consumer are on different tasks: what this worker sends
(produced here) and receives (produced elsewhere). An op runs where its device says, or next to
the variable or queue it takes by reference, as TensorFlow's placer insists; an op with no device
is on this worker. Tensors of unknown shape count as 0, gRPC's framing is not counted, and control
edges carry no data.

A collective (all-reduce mode) moves its data inside one op, so it counts what its ring algorithm
sends and receives: an all-reduce of b bytes among N workers, 2(N-1)/N·b each way (reduce-scatter,
then all-gather); an all-gather of b bytes from each, (N-1)·b each way. Any other collective in a step is
refused, never counted as nothing.
"""

import re

from parallel_tf.cluster.config import SERVER_JOBS
from parallel_tf.compat import tf

TASK = re.compile(r"/job:([^/]+)/(?:replica:\d+/)?task:(\d+)")


def task_of(device, here):
    """(job, task) of a device string; `here` for an op that has none."""
    match = TASK.search(device or "")
    return (match[1], int(match[2])) if match else here


def placed_on(op, here):
    """The task `op` runs on: its device's, unless it takes a reference or resource (a variable, a
    queue), which TensorFlow's placer puts it next to, whatever its device says."""
    for tensor in op.inputs:
        if tensor.dtype._is_ref_dtype or tensor.dtype.base_dtype == tf.resource:
            return placed_on(tensor.op, here)
    return task_of(op.device, here)


def step_bytes(fetches, here):
    """(bytes sent, bytes received) by task `here` in a run of `fetches`."""
    sent, received, _ = step_bytes_by_peer(fetches, here)
    return sent, received


def step_bytes_by_peer(fetches, here):
    """(bytes sent, bytes received, {peer task: [sent to it, received from it]}) by task `here` in a run of
    `fetches`; a collective's bytes count in the totals only (they go round the ring)."""
    pending = [fetch.op if isinstance(fetch, tf.Tensor) else fetch for fetch in tf.nest.flatten(fetches)]
    seen_ops, crossed = set(), set()
    sent = received = 0
    by_peer: dict = {}
    while pending:
        op = pending.pop()
        if op.name in seen_ops:
            continue
        seen_ops.add(op.name)
        consumer = placed_on(op, here)
        if consumer == here:
            each_way = _collective_bytes(op)
            sent, received = sent + each_way, received + each_way
        for tensor in op.inputs:
            producer = placed_on(tensor.op, here)
            if producer != consumer and (tensor.name, consumer) not in crossed:
                crossed.add((tensor.name, consumer))
                size = _size(tensor)
                if here in (producer, consumer):
                    peer = consumer if producer == here else producer
                    by_peer.setdefault(peer, [0, 0])[producer != here] += size
                sent += size if producer == here else 0
                received += size if consumer == here else 0
            pending.append(tensor.op)
        pending.extend(op.control_inputs)
    return sent, received, by_peer


COUNTED_COLLECTIVES = ("CollectiveReduce", "CollectiveGather")


def _collective_bytes(op):
    """The bytes a ring collective `op` sends from this worker, and receives; 0 for an op that is no collective. A
    collective it has no count for is refused: a step's traffic reported short would be a wrong number published."""
    if not op.type.startswith("Collective"):
        return 0
    if op.type not in COUNTED_COLLECTIVES:
        raise NotImplementedError(
            f"traffic.py counts the bytes of {' and '.join(COUNTED_COLLECTIVES)}, not of {op.type} ({op.name}) in "
            "this step: count what its algorithm sends in _collective_bytes"
        )
    size, workers = _size(op.inputs[0]), op.get_attr("group_size")
    return 2 * (workers - 1) * size // workers if op.type == "CollectiveReduce" else (workers - 1) * size


def _size(tensor):
    shape = tensor.shape
    if (
        shape.rank is None
        or not shape.is_fully_defined()
        or tensor.dtype.base_dtype in (tf.string, tf.resource, tf.variant)
    ):
        return 0
    return shape.num_elements() * tensor.dtype.size


class Meter:
    """Counts a worker's bytes over the runs of its steps; the walk is done once per kind of run."""

    def __init__(self, here):
        self.here = here  # (job, task), or None in a single process: nothing crosses
        self.sent = self.received = 0
        self.by_server = {}  # "ps:0": [sent, received], over the run: the servers' share of the traffic
        self._by_fetches = {}
        self._mark = (0, 0)

    def count(self, fetches, steps=1):
        """Counts a run of `fetches` that trained `steps` steps in a loop (--steps_per_run): its walk
        finds each crossing of the loop's body once, and it crosses once a step."""
        if not self.here:  # one process: nothing crosses, and no step should pay for finding that out
            return
        key = tuple(f.name for f in tf.nest.flatten(fetches))
        if key not in self._by_fetches:
            self._by_fetches[key] = step_bytes_by_peer(fetches, self.here)
        sent, received, by_peer = self._by_fetches[key]
        self.sent += sent * steps
        self.received += received * steps
        for (job, task), (to, back) in by_peer.items():
            if job in SERVER_JOBS:
                totals = self.by_server.setdefault(f"{job}:{task}", [0, 0])
                totals[0], totals[1] = totals[0] + to * steps, totals[1] + back * steps

    def per_step(self, steps):
        """{bytes_sent_per_step, bytes_received_per_step}: the means over the `steps` since the last call."""
        sent, received = self.sent - self._mark[0], self.received - self._mark[1]
        self._mark = (self.sent, self.received)
        return _means(sent, received, steps)

    def mean(self, steps):
        """The same means over the whole run, its `steps` steps, with each server's: {"ps:0": {sent, received}}."""
        steps = max(steps, 1)
        by_server = {
            server: {"sent": round(to / steps), "received": round(back / steps)}
            for server, (to, back) in sorted(self.by_server.items())
        }
        return {
            **_means(self.sent, self.received, steps),
            **({"bytes_per_step_by_server": by_server} if by_server else {}),
        }


def _means(sent, received, steps):
    steps = max(steps, 1)
    return {"bytes_sent_per_step": round(sent / steps), "bytes_received_per_step": round(received / steps)}
