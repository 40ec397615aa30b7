"""The network model's step times, worked out by hand. A link shaped by tc at R bit/s carries TCP payload at
R·1448/1514/8 bytes a second: 11 955.1 bytes a millisecond at 100 Mbit/s; a physical Ethernet link at
R·1448/1538/8: 117 685.3 bytes a millisecond at 1 Gbit/s."""

import pytest

from parallel_tf import cli
from parallel_tf.tools.network_model import (
    PIPELINE_PIECES,
    Latency,
    break_even_gbits,
    busiest_bytes,
    communication_ms,
    network_ms,
    overlapped_ms,
    serial_ms,
    step_bytes,
)

PER_MS_100MBIT = 1e8 * 1448 / 1514 / 8000  # 11 955.1
ETHERNET_PER_MS_1GBIT = 1e9 * 1448 / 1538 / 8000  # 117 685.3


def test_a_ring_step_carries_its_bytes_each_way_at_the_rate_and_the_bounds_hold_the_unshaped_step():
    """4 workers, a 1 MB gradient: every interface sends and receives 2·3/4 of it, 1.5 MB: 12.55 ms at 1 Gbit/s
    (tc's goodput). Overlapped, the step is at least the longer of that and the unshaped 2 ms (compute may
    overlap the transfers); serial, the unshaped step and both directions in turn."""
    carried = 1.5e6 / (1e9 * 1448 / 1514 / 8000)
    assert network_ms("allreduce", 4, 0, 1.5e6, 1.5e6, 1e9) == pytest.approx(carried) == pytest.approx(12.547, abs=1e-3)
    assert overlapped_ms(2.0, "allreduce", 4, 0, 1.5e6, 1.5e6, 1e9) == pytest.approx(carried)
    assert overlapped_ms(20.0, "allreduce", 4, 0, 1.5e6, 1.5e6, 1e9) == 20.0
    assert serial_ms(2.0, "allreduce", 4, 0, 1.5e6, 1.5e6, 1e9) == pytest.approx(2.0 + 2 * carried)


def test_a_sync_step_pipelines_the_reads_and_the_writes_through_the_ps():
    """2 workers read 38 400 bytes each and write 9 600 (8-bit): the ps sends 76 800 one after the other, and
    the last worker's write, 9 600, follows: 86 400 bytes, 7.227 ms at 100 Mbit/s; a worker's own link carries
    only its 48 000."""
    assert network_ms("sync", 2, 1, 9600, 38400, 1e8) == pytest.approx(86400 / PER_MS_100MBIT)
    assert round(86400 / PER_MS_100MBIT, 3) == 7.227


def test_parameter_servers_share_the_servers_load_but_not_a_workers_own_link():
    """4 workers reading and writing 38 400 bytes: one ps carries 5 of them in turn (192 000 bytes), two
    carry half (96 000); four would carry 48 000 each, but every worker's own link reads 38 400 and then
    writes 38 400, so the step is bound there, at 76 800 bytes: 6.42 ms at 100 Mbit/s, not a quarter."""
    one, two, four = (network_ms("sync", 4, ps, 38400, 38400, 1e8) for ps in (1, 2, 4))
    assert one == pytest.approx(2 * two) == pytest.approx(5 * 38400 / PER_MS_100MBIT)
    assert four == pytest.approx(76800 / PER_MS_100MBIT) == pytest.approx(6.424, abs=1e-3)


def test_an_async_step_is_bound_by_the_busier_of_its_own_link_and_the_ps():
    """4 workers pushing and reading 38 400 bytes: a worker's own link takes 76 800 a step (6.42 ms); the ps
    serves 4 pushes in 12.85 ms, which bounds a step; with 2 workers, 6.42 ms, under the 10 ms unshaped step."""
    assert network_ms("async", 4, 1, 38400, 38400, 1e8) == pytest.approx(4 * 38400 / PER_MS_100MBIT)
    assert overlapped_ms(10.0, "async", 2, 1, 38400, 38400, 1e8) == 10.0


def test_a_delay_adds_once_per_one_way_crossing_it_waits_on():
    """In a loop of steps (--steps_per_run=10) a ps step waits on three transfers, each a round trip (the
    receiver asks, the sender answers): 6 crossings, 30 ms at 5 ms one way; a run of one step, on 5 in sync
    (25 ms) and 7 in async (35 ms), the bench's slopes; a ring of 4 on 2·4 = 8, 40 ms, loop or not (the bench's
    slopes too: 7.5-7.9 ms a ms of delay). The serial bound adds the same to the unshaped step."""
    assert network_ms("sync", 1, 1, 0, 0, 1e8, latency=Latency(5, steps_per_run=10)) == 30
    assert network_ms("async", 2, 1, 0, 0, 1e8, latency=Latency(5, steps_per_run=10)) == 30
    assert network_ms("sync", 1, 1, 0, 0, 1e8, latency=Latency(5)) == 25
    assert network_ms("async", 2, 1, 0, 0, 1e8, latency=Latency(5)) == 35
    assert network_ms("allreduce", 4, 0, 0, 0, 1e8, latency=Latency(5)) == 40
    assert network_ms("allreduce", 4, 0, 0, 0, 1e8, latency=Latency(5, steps_per_run=10)) == 40
    assert serial_ms(10, "sync", 2, 1, 0, 0, 1e8, latency=Latency(5)) == 35


def test_a_hierarchical_step_waits_on_its_groups_four_round_trips_and_its_share_of_an_exchanges_four():
    """A group's step, 4 round trips (8 crossings), and the central exchange's 4 more every --central_every=k
    steps: at 5 ms, 80 ms a step with an exchange every step, 8·5 + 8·5/4 = 50 with one every fourth."""
    assert network_ms("hierarchical", 2, 1, 0, 0, 1e8, latency=Latency(5)) == 80
    assert network_ms("hierarchical", 2, 1, 0, 0, 1e8, latency=Latency(5, exchange_every=4)) == 50
    assert serial_ms(10, "hierarchical", 2, 1, 0, 0, 1e8, latency=Latency(5, exchange_every=4)) == 60


def test_a_mode_without_a_formula_is_refused_not_modelled_as_sync():
    with pytest.raises(ValueError, match="no formula for --mode=gossip"):
        network_ms("gossip", 2, 0, 1, 1, 1e8)


def test_beyond_this_machine_every_interface_counts_the_workers_own_too():
    """100 MB at 1 Gbit/s on Ethernet (117 685 bytes a ms), 8 workers: the ring moves 2·7/8 of it each way, 1 487 ms,
    as servers on the workers' own machines do; one ps sends 8 copies and takes the last write, 9 of them, 7 648 ms;
    a ps per worker carries 9/8 of the model, but each worker reads all 100 MB and then writes 100 MB, 1 699 ms: the
    ring wins. Pipelined in 4 pieces a server (BytePS; the bench's), a worker carries 100 MB each way at once and
    a quarter of it around them, as a server does: 125 MB, 1 062 ms, 1.4x the ring."""
    assert communication_ms("ring", 8, 1e8, 1) == pytest.approx(1.75e8 / ETHERNET_PER_MS_1GBIT, rel=1e-6)
    assert communication_ms("ps", 8, 1e8, 1) == pytest.approx(9e8 / ETHERNET_PER_MS_1GBIT, rel=1e-6)
    assert communication_ms("ps x N", 8, 1e8, 1) == pytest.approx(2e8 / ETHERNET_PER_MS_1GBIT, rel=1e-6)
    assert PIPELINE_PIECES == 4
    assert communication_ms("ps x N, pipelined", 8, 1e8, 1) == pytest.approx(1.25e8 / ETHERNET_PER_MS_1GBIT)
    assert round(communication_ms("ps x N, pipelined", 8, 1e8, 1)) == 1062
    assert round(communication_ms("ps x N", 8, 1e8, 1)) == 1699
    # A ps on every worker's machine: its interface carries its server's 7/8 out and in, and its worker's reads
    # and writes of the other 7 pieces: the ring's 2·7/8 each way.
    assert communication_ms("ps x N, co-located", 8, 1e8, 1) == communication_ms("ring", 8, 1e8, 1)


def test_8bit_pays_below_the_bandwidth_at_which_its_saved_bytes_take_its_encoding_time():
    """40 000 bytes of parameters, 8 workers: 8-bit saves 3/4 of the write the busiest interface carries last
    (one ps), or of each worker's own write (a ps per worker): 30 000 bytes either way; at 1 ms of encoding that
    is 240 Mbit/s of payload, 254.9 Mbit/s on Ethernet."""
    assert break_even_gbits("ps", 8, 40000, 1.0) == pytest.approx(0.2549, abs=1e-4)
    assert break_even_gbits("ps x N", 8, 40000, 1.0) == pytest.approx(0.2549, abs=1e-4)


def test_where_one_server_holds_most_of_the_model_its_share_bounds_the_step():
    """The CIFAR-10 CNN's 2,180,392 bytes on 4 parameter servers, whole variables placed: its dense kernel,
    2,097,152 bytes, and a bias of 128 on one, 96.19% of the traffic. 4 workers at 100 Mbit/s: that server
    carries 5 workers' worth of its share, 10.49 MB, 877 ms. Split evenly, a server would carry 228 ms' worth,
    and each worker's own link, reading the model and then writing it, 365 ms, would bound the step."""
    share = (2097152 + 128) / 2180392
    uneven = network_ms("sync", 4, 4, 2180392, 2180392, 1e8, server_share=share)
    assert uneven == pytest.approx(5 * 2180392 * share / PER_MS_100MBIT) == pytest.approx(877.2, abs=0.1)
    assert network_ms("sync", 4, 4, 2180392, 2180392, 1e8) == pytest.approx(2 * 2180392 / PER_MS_100MBIT)


def test_four_servers_for_four_workers_pipelined_in_p_pieces_carry_1_plus_1_over_p_models_each_way():
    """N = 4 workers, k = 4 servers, M bytes of model: the ring carries 2·3/4 M = 1.5 M each way. Pipelined in p
    pieces a server (graph/pipeline.py), every interface carries M one way and, around it, one round of the
    other: a worker's first round of pushes goes before any pull, and its last pull after every push; a
    server takes each of the 4 workers' quarter and sends it back 4 times. M (1 + 1/p): 1.25 M at p = 4, 1.2x
    the ring; 1.125 M at p = 8, 1.33x. As a step runs without the pipeline, reading then writing, a worker
    carries 2 M: 0.75x."""
    model = 2180392
    ring = step_bytes("ring", 4, model)
    assert ring == pytest.approx(1.5 * model)
    assert busiest_bytes("sync", 4, 4, model, model, pieces=4) == pytest.approx(1.25 * model)
    assert ring / busiest_bytes("sync", 4, 4, model, model, pieces=8) == pytest.approx(1.5 / 1.125)
    assert ring / step_bytes("ps x N, pipelined", 4, model) == pytest.approx(1.5 / (1 + 1 / PIPELINE_PIECES))
    assert ring / step_bytes("ps x N", 4, model) == pytest.approx(0.75)


def test_the_pipeline_lowers_the_overlapped_bound_not_the_serial_one():
    """83 ms unshaped, 4 workers, 4 servers, the CNN's 2,180,392 bytes each way at 100 Mbit/s (11,955 bytes a
    ms of TCP payload), 8 pieces a server: at best 1.125 · 2,180,392 / 11,955 = 205.2 ms of transfers; at worst
    the pieces land together and are pulled after, as a plain step reads and writes: 83 + 2 · 182.4 = 447.8."""
    shape = ("sync", 4, 4, 2180392, 2180392, 1e8)
    assert overlapped_ms(83.0, *shape, pieces=8) == pytest.approx(1.125 * 2180392 / PER_MS_100MBIT)
    assert overlapped_ms(83.0, *shape, pieces=8) == pytest.approx(205.2, abs=0.1)
    assert overlapped_ms(83.0, *shape) == pytest.approx(364.8, abs=0.1)
    assert serial_ms(83.0, *shape) == pytest.approx(447.8, abs=0.1)


def test_a_step_shorter_than_a_second_is_said_in_milliseconds():
    """PowerSGD's rank-4 step for the MLP sends 5,840 bytes: at 100 Mbit/s, 5840 · 8 / 10⁸ s = 0.467 ms, and
    1000 of them 467 ms; a line of "0.000 s" would say nothing."""
    assert cli.duration(5840 * 8 / 1e8) == "0.467 ms"
    assert cli.duration(1000 * 5840 * 8 / 1e8) == "467 ms"
    assert [cli.duration(s) for s in (2.5, 42, 150, 5400)] == ["2.5 s", "42 s", "2.5 min", "1.5 h"]
