"""A step's time on a network: what it takes where the network costs nothing, plus the time its busiest
interface takes to carry the step's bytes at the link's rate (BytePS's analysis, Jiang et al., OSDI 2020).

Each interface is shaped in each direction on its own (launch/hosts.py), so what counts is the bytes one
direction of one interface carries. With N workers, P parameter servers, and a worker sending `sent`
and receiving `received` bytes a step (summary.json's bytes_sent_per_step and bytes_received_per_step,
which count a codec's payload, not float):

    sync, hierarchical   each ps sends N·received/P (the reads) and receives N·sent/P (the writes) a step.
                         The reads go out one after another, and a worker writes as soon as it has read
                         and computed, while the ps still sends the others theirs: the busier direction
                         carries N·max/P, and the other adds one worker's min/P after it (in
                         hierarchical, N is a group's workers and the ps its local one)
    async                a worker reads, computes and pushes in turn, sent + received on its own
                         interface; the ps serves the N workers' pushes and reads at once, so its busier
                         direction, N·max(sent, received)/P, bounds a round of N steps too
    allreduce            the ring sends and receives 2(N−1)/N of the gradient vector on every interface
                         at once (the traffic meter already counts that): max(sent, received)

That is the overlapped bound: each direction as busy as it can be while the other works. The serial
bound has every direction of a step in turn, N·(sent + received)/P through the ps and sent + received
through a ring's interface: what TCP's fair share does when N workers read at once (their reads end
together, so the writes cannot start early) and what two cores do when they cannot copy both ways at
once. A step measures between the two (BENCHMARKS.md: where, and by how much outside).

A link carries TCP at GOODPUT of its rate: 1448 bytes of payload in every 1514-byte Ethernet frame. A
one-way delay d adds 4d to a parameter-server step (two round trips: the read, the write) and 2(N−1)d
to a ring (its steps pass each chunk on one way). No kernel here has netem, so the delay terms are
not checked against a measurement.
"""

GOODPUT = 1448 / 1514


def payload_bytes_per_ms(bits_per_second):
    """What a link of this rate carries of TCP payload, in bytes a millisecond."""
    return bits_per_second * GOODPUT / 8 / 1000


def predicted_ms(unshaped_ms, mode, workers, num_ps, sent, received, bits_per_second, delay_ms=0.0):
    """A step's milliseconds on the link: the unshaped step's, plus what the busiest interface adds (in
    async, the ps's busier direction bounds a step on its own). With `unshaped_ms` 0: what the network adds."""
    bytes_per_ms = payload_bytes_per_ms(bits_per_second)
    if mode == "allreduce":
        return unshaped_ms + max(sent, received) / bytes_per_ms + 2 * (workers - 1) * delay_ms
    if mode == "async":
        own = unshaped_ms + (sent + received) / bytes_per_ms + 4 * delay_ms
        return max(own, workers * max(sent, received) / num_ps / bytes_per_ms)
    pipelined = workers * max(sent, received) + min(sent, received)
    return unshaped_ms + pipelined / num_ps / bytes_per_ms + 4 * delay_ms


def serial_ms(unshaped_ms, mode, workers, num_ps, sent, received, bits_per_second, delay_ms=0.0):
    """The serial bound: the unshaped step, then every direction of the busiest interface in turn."""
    bytes_per_ms = payload_bytes_per_ms(bits_per_second)
    if mode == "allreduce":
        return unshaped_ms + (sent + received) / bytes_per_ms + 2 * (workers - 1) * delay_ms
    return unshaped_ms + workers * (sent + received) / num_ps / bytes_per_ms + 4 * delay_ms


WORKERS = (8, 32, 128, 256)
GBITS = (1, 10, 25, 100)
BEYOND_BEGIN = "<!-- network-model:begin (written by python -m parallel_tf.tools.network_model) -->"
BEYOND_END = "<!-- network-model:end -->"


def communication_ms(layout, workers, param_bytes, gbits):
    """What a float32 sync step's transfers take, at `gbits` Gbit/s: a ring all-reduce, or parameter servers,
    one ("ps") or as many as the workers ("ps x N", BytePS's layout, each on a machine of its own)."""
    num_ps = {"ring": 0, "ps": 1, "ps x N": workers}[layout]
    mode = "allreduce" if layout == "ring" else "sync"
    sent = 2 * (workers - 1) / workers * param_bytes if layout == "ring" else param_bytes
    return predicted_ms(0.0, mode, workers, num_ps, sent, sent, gbits * 1e9)


def break_even_gbits(param_bytes, added_ms, num_ps=1, writes_in_turn=1):
    """The bandwidth below which 8-bit gradients pay for their encoding on parameter servers: the
    parameters still go out in float, so a step saves 3/4 of the writes that wait for the reads: the last
    one in the overlapped bound, all N (`writes_in_turn`) in the serial one; 0.75·M/P bytes each, against
    `added_ms` of encoding and decoding."""
    saved_bytes = 0.75 * param_bytes * writes_in_turn / num_ps
    return saved_bytes / added_ms / payload_bytes_per_ms(1e9)


def beyond_this_machine(models, encode_ns_per_parameter):
    """Markdown: the model's sync step transfers for `models` ({title: float32 bytes}) at 8-256 workers and
    1-100 Gbit/s, ring against parameter servers, and where 8-bit gradients pay on parameter servers."""
    lines = [BEYOND_BEGIN]
    for title, param_bytes in models.items():
        lines += ["", f"#### {title}: {param_bytes / 1e6:.2f} MB of float32 parameters", ""]
        lines += ["Transfers of one sync step, ms: ring all-reduce / one ps / a ps per worker.", ""]
        lines += ["| workers | " + " | ".join(f"{g} Gbit/s" for g in GBITS) + " |", "|---" * (len(GBITS) + 1) + "|"]
        for n in WORKERS:
            cells = [
                " / ".join(_ms(communication_ms(layout, n, param_bytes, g)) for layout in ("ring", "ps", "ps x N"))
                for g in GBITS
            ]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        added_ms = encode_ns_per_parameter * param_bytes / 4 / 1e6
        one_ps = [break_even_gbits(param_bytes, added_ms, 1, writes) for writes in (1, 8)]
        per_worker = [break_even_gbits(param_bytes, added_ms, 8, writes) for writes in (1, 8)]
        lines += [
            "",
            f"8-bit gradients cost {added_ms:.3g} ms a step to encode and decode at this machine's "
            f"{encode_ns_per_parameter:.3g} ns a parameter. At 8 workers they pay below {one_ps[0]:.3g} to "
            f"{one_ps[1]:.3g} Gbit/s on one ps (the overlapped and the serial bound), and below "
            f"{per_worker[0]:.3g} to {per_worker[1]:.3g} Gbit/s on a ps per worker.",
        ]
    return "\n".join([*lines, "", BEYOND_END])


def _ms(value):
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def main(argv):
    """`python -m parallel_tf.tools.network_model --cnn_bytes=B --encode_ns_per_parameter=T --report=FILE`."""
    from absl import flags  # here: the model above is plain arithmetic, imported by the bench and the tests

    from parallel_tf.files import write_between

    values = flags.FLAGS
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

    flags.DEFINE_float("cnn_bytes", None, "The CNN's float32 parameter bytes (the bench's all-reduce KB sent).")
    flags.DEFINE_float("encode_ns_per_parameter", None, "8-bit's added ns a parameter a step, from the bench.")
    flags.DEFINE_string("report", None, "Markdown file to write the tables into, between markers of their own.")
    flags.mark_flags_as_required(["cnn_bytes", "encode_ns_per_parameter"])
    app.run(main)
