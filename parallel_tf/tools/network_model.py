"""A step's time on a network: what it takes where the network costs nothing, and the time its busiest
interface takes to carry the step's bytes at the link's rate (BytePS's analysis, Jiang et al., OSDI 2020).

Each interface is shaped in each direction on its own (launch/hosts.py), so what counts is the bytes one
direction of one interface carries. With N workers, P parameter servers, and a worker sending `sent`
and receiving `received` bytes a step (summary.json's bytes_sent_per_step and bytes_received_per_step,
which count a codec's payload, not float), every interface counted, the workers' own too:

    sync, hierarchical   each ps sends N·received/P (the reads) and receives N·sent/P (the writes) a step.
                         The reads go out one after another, and a worker writes as soon as it has read
                         and computed, while the ps still sends the others theirs: the ps's busier
                         direction carries N·max/P, and the other adds one worker's min/P after it (in
                         hierarchical, N is a group's workers and the ps its local one). Each worker's
                         own interface carries its reads, then its writes: a step reads every parameter
                         before it computes and writes its gradients after, so received + sent, in turn.
                         The busier of the two interfaces is the step's.
    sync, pipelined      --pipeline_pieces=p (graph/pipeline.py): a worker writes a round of pieces (one a
                         server) while it reads the one before, so each interface carries its busier
                         direction and one round (1/p) of the other, around it: a worker max + min/p, a ps
                         N·(max + min/p)/P.
    async                a worker reads, computes and pushes in turn, sent + received on its own
                         interface; the ps serves the N workers' pushes and reads at once, so its busier
                         direction, N·max(sent, received)/P, bounds a round of N steps too
    allreduce            the ring sends and receives 2(N−1)/N of the gradient vector on every interface
                         at once (the traffic meter already counts that): max(sent, received)

Two bounds on a step. Overlapped: the longer of the unshaped step and those transfers, each direction as
busy as it can be while the other works and while the workers compute (a bucket's all-reduce overlaps
backprop; the ps serves one worker while another computes): no step can be shorter. Serial: the
unshaped step, then every direction of the busiest interface in turn, N·(sent + received)/P through the
ps and sent + received through a worker's or a ring's interface: what TCP's fair share does when N workers
read at once (their reads end together, so the writes cannot start early), and what two cores do when
they cannot copy both ways at once. A step measures between the two (BENCHMARKS.md: where, and by how much
outside).

A link carries TCP at a share of its rate: 1448 bytes of payload in every frame. tc counts a frame's
1514 bytes (the links of launch/hosts.py: TC_GOODPUT); a physical Ethernet link also spends its frame
check, preamble and gap, 1538 bytes (ETHERNET_GOODPUT: the tables beyond this machine). A one-way delay d
adds the crossings a step waits on, in turn: counts fitted to the bench's slopes from 2 to 20 ms of delay
(BENCHMARKS.md, "Latency"), not derived. A sync step inside a loop of steps (--steps_per_run) waits on 6d, a
round trip for each transfer (the parameters to the worker, its gradient to the server, the server's answer
back: TensorFlow's receiver asks for every tensor and the sender answers, RecvTensor), and a run of one step
on 5d: traced (BENCHMARKS.md, "Latency"), the run reaches the ps (d), the worker's pull of the parameters starts
then and takes a round trip (2d), the gradients cross (d), the report comes back (d); one earlier trace had the
pull at one crossing, so the fifth is not always where it lies. Async is the other way
round: 6d in its loop, 7d a run of one step. A ring of N waits on 2Nd, loop or not, fitted too: the slopes
were 3.4-3.6 ms a ms of delay at 2 workers and 7.5-7.9 at 4 (its 2(N−1) steps, each crossing once with its
request sent ahead, and the rest of a round trip to start); a round trip for each step, 4(N−1)d, put the ring
of 4 31% under its bounds. A hierarchical step is two tiers: a group's SyncReplicasOptimizer step waits on
four round trips (8d: the parameters read from the local ps, the gradients into its accumulators, the token
its chief's queue runner gives back once they are applied, and the group's barrier), and every
--central_every=k steps the group chief's exchange on four more (8d: its sum applied on the central ps, the
exchange counted there, the local ps reading the central values and answering the chief), 8d + 8d/k a step;
its slopes, 7.2-7.5 ms a ms of delay with k = 100 and 14.9-15.8 with k = 1, against the model's 8 and 16.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

TC_GOODPUT = 1448 / 1514
ETHERNET_GOODPUT = 1448 / 1538
MODES = ("sync", "hierarchical", "async", "allreduce")  # the modes the model has a formula for
GROUP_STEP_DELAYS, EXCHANGE_DELAYS = 8, 8  # hierarchical's two tiers, one-way delays each
# One-way delays a step waits on, given the workers, hierarchical's --central_every and whether the step is
# one of a loop of steps (--steps_per_run > 1)
DELAYS_A_STEP = {
    "sync": lambda workers, exchange_every, looped: 6 if looped else 5,
    "hierarchical": lambda workers, exchange_every, looped: GROUP_STEP_DELAYS + EXCHANGE_DELAYS / exchange_every,
    "async": lambda workers, exchange_every, looped: 6 if looped else 7,
    "allreduce": lambda workers, exchange_every, looped: 2 * workers,
}


def payload_bytes_per_ms(bits_per_second, goodput=TC_GOODPUT):
    """What a link of this rate carries of TCP payload, in bytes a millisecond."""
    return bits_per_second * goodput / 8 / 1000


def busiest_bytes(mode, workers, num_ps, sent, received, pieces=0, server_share=None):
    """The bytes the busiest interface carries a step, each direction as busy as it can be while the other
    works. `pieces`: a sync worker's reads overlap its writes in rounds of that many pieces a server (BytePS's
    pipeline, --pipeline_pieces): one round goes before the other direction starts, so every interface
    carries its busier direction and one round of the other; 0: a sync step reads, then writes.
    `server_share`: the busiest server's share of a worker's traffic with the servers (summary.json's
    bytes_per_step_by_server); default an even 1/P."""
    if mode not in MODES:
        raise ValueError(f"the network model has no formula for --mode={mode}")
    if mode == "allreduce":
        return max(sent, received)
    share = 1 / num_ps if server_share is None else server_share
    if mode == "async":
        return max(sent + received, workers * max(sent, received) * share)
    if pieces:
        one_way = max(sent, received) + min(sent, received) / pieces
        return max(workers * one_way * share, one_way)
    server = (workers * max(sent, received) + min(sent, received)) * share
    return max(server, sent + received)


@dataclasses.dataclass(frozen=True)
class Latency:
    """What a step waits on besides its bytes: the link's one-way delay, hierarchical's --central_every (how often
    a group exchanges with the central ps) and the steps of a session run (--steps_per_run)."""

    delay_ms: float = 0.0
    exchange_every: int = 1
    steps_per_run: int = 1

    def step_ms(self, mode, workers):
        """The one-way delays a step of `mode` waits on (DELAYS_A_STEP), in ms."""
        return DELAYS_A_STEP[mode](workers, self.exchange_every, self.steps_per_run > 1) * self.delay_ms


def network_ms(mode, workers, num_ps, sent, received, bits_per_second, pieces=0, server_share=None, latency=Latency()):
    """What the busiest interface takes a step (busiest_bytes at tc's goodput), and its delays."""
    carried = busiest_bytes(mode, workers, num_ps, sent, received, pieces, server_share)  # refuses a mode it lacks
    return carried / payload_bytes_per_ms(bits_per_second) + latency.step_ms(mode, workers)


def overlapped_ms(unshaped_ms, *shape, **options):
    """The overlapped bound: the longer of the unshaped step and its transfers on the link (network_ms's
    arguments after the unshaped step's milliseconds)."""
    return max(unshaped_ms, network_ms(*shape, **options))


def serial_ms(
    unshaped_ms, mode, workers, num_ps, sent, received, bits_per_second, server_share=None, latency=Latency()
):
    """The serial bound: the unshaped step, then every direction of the busiest interface in turn. A pipelined
    step (--pipeline_pieces) has the same: at worst its pieces all land together and are pulled after."""
    if mode not in MODES:
        raise ValueError(f"the network model has no formula for --mode={mode}")
    bytes_per_ms = payload_bytes_per_ms(bits_per_second)
    delays = latency.step_ms(mode, workers)
    if mode == "allreduce":
        return unshaped_ms + (sent + received) / bytes_per_ms + delays
    share = 1 / num_ps if server_share is None else server_share
    return unshaped_ms + workers * (sent + received) * share / bytes_per_ms + delays


WORKERS = (8, 32, 128, 256)
PIPELINE_PIECES = 4  # the bench's sync_servers_pipelined
GBITS = (1, 10, 25, 100)
BEYOND_BEGIN = "<!-- network-model:begin (written by python -m parallel_tf.tools.network_model) -->"
BEYOND_END = "<!-- network-model:end -->"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a sync step's parameters live, for the tables beyond this machine."""

    title: str
    mode: str
    servers: Callable[[int], int]  # parameter servers for N workers
    pieces: int = 0  # a server's pieces, pulled while others are pushed (BytePS, --pipeline_pieces); 0: read, write
    colocated: bool = False  # each server on a worker's machine: that machine's interface carries both's traffic


LAYOUTS = {
    "ring": Layout("ring all-reduce", "allreduce", lambda n: 0),
    "ps": Layout("one ps", "sync", lambda n: 1),
    "ps x N": Layout("a ps per worker on machines of their own, a step reading then writing", "sync", lambda n: n),
    "ps x N, pipelined": Layout(
        f"the same, pipelined in {PIPELINE_PIECES} pieces a server (BytePS)", "sync", lambda n: n, PIPELINE_PIECES
    ),
    "ps x N, co-located": Layout("a ps on every worker's machine", "sync", lambda n: n, colocated=True),
}


def step_bytes(layout, workers, param_bytes, written_bytes=None):
    """The busiest interface's bytes in a sync step of `layout` (LAYOUTS), float32 parameters read, the
    gradients written as `written_bytes` (default float32 too). Co-located, a machine's interface carries its
    server's 1/N to the other N−1 workers and back, and its worker's reads and writes of the other N−1
    servers' pieces: (N−1)/N of a read and a write each way, the ring's bytes, however they overlap."""
    shape = LAYOUTS[layout]
    written = param_bytes if written_bytes is None else written_bytes
    if shape.mode == "allreduce":
        ring = 2 * (workers - 1) / workers
        return busiest_bytes(shape.mode, workers, 0, ring * written, ring * written)
    if shape.colocated:
        return (workers - 1) / workers * (param_bytes + written)
    return busiest_bytes(shape.mode, workers, shape.servers(workers), written, param_bytes, shape.pieces)


def communication_ms(layout, workers, param_bytes, gbits):
    """What a float32 sync step's transfers take on a physical Ethernet link of `gbits` Gbit/s."""
    return step_bytes(layout, workers, param_bytes) / payload_bytes_per_ms(gbits * 1e9, ETHERNET_GOODPUT)


def break_even_gbits(layout, workers, param_bytes, added_ms):
    """The bandwidth below which 8-bit gradients pay for their encoding in `layout` (parameter servers: the
    parameters still come down in float): the busiest interface's bytes they save, against `added_ms` of
    encoding and decoding, on physical Ethernet."""
    saved = step_bytes(layout, workers, param_bytes) - step_bytes(layout, workers, param_bytes, param_bytes / 4)
    return saved / added_ms / payload_bytes_per_ms(1e9, ETHERNET_GOODPUT)


def beyond_this_machine(models, encode_ns_per_parameter):
    """Markdown: the model's sync step transfers for `models` ({title: float32 bytes}) at 8-256 workers and
    1-100 Gbit/s in every layout, and where 8-bit gradients pay on parameter servers."""
    lines = [BEYOND_BEGIN]
    for title, param_bytes in models.items():
        lines += ["", f"#### {title}: {param_bytes / 1e6:.2f} MB of float32 parameters", ""]
        named = " / ".join(layout.title for layout in LAYOUTS.values())
        lines += [f"Transfers of one sync step on Ethernet, ms: {named}.", ""]
        lines += ["| workers | " + " | ".join(f"{g} Gbit/s" for g in GBITS) + " |", "|---" * (len(GBITS) + 1) + "|"]
        for n in WORKERS:
            cells = [" / ".join(_ms(communication_ms(layout, n, param_bytes, g)) for layout in LAYOUTS) for g in GBITS]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        added_ms = encode_ns_per_parameter * param_bytes / 4 / 1e6
        one_ps, per_worker = (break_even_gbits(layout, 8, param_bytes, added_ms) for layout in ("ps", "ps x N"))
        where = (
            f"below {one_ps:.3g} Gbit/s on one ps as on a ps per worker"
            if f"{one_ps:.3g}" == f"{per_worker:.3g}"
            else f"below {one_ps:.3g} Gbit/s on one ps and below {per_worker:.3g} Gbit/s on a ps per worker"
        )
        lines += [
            "",
            f"8-bit gradients cost {added_ms:.3g} ms a step to encode and decode at this machine's "
            f"{encode_ns_per_parameter:.3g} ns a parameter. At 8 workers they pay {where}: either way they save "
            "3/4 of one model's writes on the busiest interface (the last write through one ps; a worker's own).",
        ]
    return "\n".join([*lines, "", BEYOND_END])


def _ms(value):
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def main(argv):
    """`python -m parallel_tf.tools.network_model --cnn_bytes=B --encode_ns_per_parameter=T [--report=FILE]`:
    the tables beyond this machine, printed, and written into FILE between their markers."""
    from absl import flags  # here: the model above is plain arithmetic, imported by the bench and the tests

    from parallel_tf.cli import exit_config_error
    from parallel_tf.files import write_between

    values = flags.FLAGS
    if len(argv) > 1:
        exit_config_error(f"unexpected argument {argv[1]!r}; flags look like --name=value")
    missing = [name for name in ("cnn_bytes", "encode_ns_per_parameter") if values[name].value is None]
    if missing:
        exit_config_error(
            f"give {' and '.join('--' + name for name in missing)}: the CNN's float32 parameter bytes and 8-bit's "
            "added ns a parameter, both from the bench (--help says where)"
        )
    models = {
        "CIFAR-10 CNN (recipes/cifar10.py)": values.cnn_bytes,
        "25M parameters (ResNet-50's size)": 25e6 * 4,
    }
    generated = beyond_this_machine(models, values.encode_ns_per_parameter)
    print(generated)
    if values.report:
        write_between(values.report, generated, BEYOND_BEGIN, BEYOND_END, new_file_title="# Benchmarks")


if __name__ == "__main__":
    from absl import app, flags

    from parallel_tf.cli import parse_flags_or_exit

    flags.DEFINE_float("cnn_bytes", None, "The CNN's float32 parameter bytes (the bench's all-reduce KB sent).")
    flags.DEFINE_float("encode_ns_per_parameter", None, "8-bit's added ns a parameter a step, from the bench.")
    flags.DEFINE_string("report", None, "Markdown file to write the tables into, between markers of their own.")
    app.run(main, flags_parser=parse_flags_or_exit)
