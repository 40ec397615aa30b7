"""The network model's step times, worked out by hand. A link of R bit/s carries TCP payload at
R·1448/1514/8 bytes a second: 11 955.1 bytes a millisecond at 100 Mbit/s, 119 550.9 at 1 Gbit/s."""

import pytest

from parallel_tf.tools.network_model import break_even_gbits, communication_ms, predicted_ms

PER_MS_100MBIT = 1e8 * 1448 / 1514 / 8000  # 11 955.1


def test_a_ring_step_adds_its_bytes_each_way_at_the_rate():
    """4 workers, a 1 MB gradient: every interface sends and receives 2·3/4 of it, 1.5 MB: 12.55 ms at 1 Gbit/s."""
    assert predicted_ms(2.0, "allreduce", 4, 0, 1.5e6, 1.5e6, 1e9) == pytest.approx(2.0 + 12.547, abs=1e-3)


def test_a_sync_step_pipelines_the_reads_and_the_writes_through_the_ps():
    """2 workers read 38 400 bytes each and write 9 600 (8-bit): the ps sends 76 800 one after the other, and
    the last worker's write, 9 600, follows: 86 400 bytes, 7.227 ms at 100 Mbit/s, on a 4 ms step."""
    assert predicted_ms(4.0, "sync", 2, 1, 9600, 38400, 1e8) == pytest.approx(4.0 + 86400 / PER_MS_100MBIT)
    assert round(86400 / PER_MS_100MBIT, 3) == 7.227


def test_two_parameter_servers_halve_what_each_carries():
    one, two = (predicted_ms(0.0, "sync", 4, ps, 38400, 38400, 1e8) for ps in (1, 2))
    assert one == pytest.approx(2 * two) == pytest.approx(5 * 38400 / PER_MS_100MBIT)


def test_an_async_step_is_bound_by_the_busier_of_its_own_link_and_the_ps():
    """4 workers pushing and reading 38 400 bytes: a worker's own link takes 76 800 a step (6.42 ms) on
    a 5 ms step, 11.42 ms; the ps serves 4 pushes in 12.85 ms, which bounds a step; with 2 workers, 6.42."""
    assert predicted_ms(5.0, "async", 4, 1, 38400, 38400, 1e8) == pytest.approx(4 * 38400 / PER_MS_100MBIT)
    assert predicted_ms(5.0, "async", 2, 1, 38400, 38400, 1e8) == pytest.approx(5.0 + 76800 / PER_MS_100MBIT)


def test_a_delay_adds_once_per_one_way_crossing():
    """A ps step makes two round trips (read, write): 4 crossings; a ring of 4 passes chunks on 2·3 times."""
    assert predicted_ms(0, "sync", 1, 1, 0, 0, 1e8, delay_ms=5) == 20
    assert predicted_ms(0, "allreduce", 4, 0, 0, 0, 1e8, delay_ms=5) == 30


def test_beyond_this_machine_a_ps_per_worker_halves_the_ring_and_one_ps_falls_behind():
    """100 MB at 1 Gbit/s (119 550 bytes a ms), 8 workers: the ring moves 2·7/8 of it each way, 1 464 ms; one
    ps sends 8 copies and takes the last write, 9 of them, 7 528 ms; a ps per worker an eighth of that, 941."""
    assert communication_ms("ring", 8, 1e8, 1) == pytest.approx(1.75e8 / 119550.86, rel=1e-6)
    assert communication_ms("ps", 8, 1e8, 1) == pytest.approx(9e8 / 119550.86, rel=1e-6)
    assert communication_ms("ps x N", 8, 1e8, 1) == pytest.approx(9e8 / 8 / 119550.86, rel=1e-6)


def test_8bit_pays_below_the_bandwidth_at_which_its_saved_bytes_take_its_encoding_time():
    """40 000 bytes of parameters: 8-bit saves 3/4 of the last write, 30 000 bytes; at 1 ms of encoding that
    is 240 Mbit/s of payload, 250.9 Mbit/s on the wire. With 8 ps, each saves an eighth; with 8 writes in
    turn (the serial bound), 8 times as much."""
    assert break_even_gbits(40000, 1.0) == pytest.approx(0.2509, abs=1e-4)
    assert break_even_gbits(40000, 1.0, num_ps=8) == pytest.approx(0.2509 / 8, abs=1e-4)
    assert break_even_gbits(40000, 1.0, writes_in_turn=8) == pytest.approx(0.2509 * 8, abs=1e-3)
