"""The delay line (launch/delay_line.py) where the kernel has no netem: its netlink messages, worked out byte by
byte from linux/netfilter/nfnetlink_queue.h; and on two simulated hosts, the round trip, the stream and the
loss it was set to, measured (tests/link_probe.py); a launch on a delayed, lossy link slowed by at least the
network model's delays, and one whose delay line dies stopped in one line. The measurements need a private
network namespace and iptables; where either is missing they skip, saying why."""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys

import pytest
from conftest import REPO, alive, launcher_command

from parallel_tf.launch import delay_line, hosts
from parallel_tf.tools.network_model import Latency, network_ms

TIMEOUT = 180
PROBE = str(REPO / "tests" / "link_probe.py")


def test_a_configuration_message_is_nfnetlink_queues_layout():
    """Binding queue 0: netlink's header (28 bytes in all; type NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_CONFIG =
    0x0302; flags NLM_F_REQUEST | NLM_F_ACK = 5), nfgenmsg (AF_UNSPEC, version 0, queue 0 big-endian), and one
    attribute: length 8, NFQA_CFG_CMD = 1, the command NFQNL_CFG_CMD_BIND = 1, a pad byte, protocol family 0."""
    bind = delay_line._attribute(delay_line.CONFIG_COMMAND, struct.pack(">BxH", delay_line.BIND, 0))
    message = delay_line._message(delay_line.CONFIG, [bind], delay_line.REQUEST | delay_line.ACK)
    header = struct.pack("=IHHII", 28, 0x0302, 5, 0, 0)
    assert message == header + bytes([0, 0, 0, 0]) + struct.pack("=HH", 8, 1) + bytes([1, 0, 0, 0])


def test_a_verdict_accepts_every_packet_up_to_the_last_due():
    """NFQNL_MSG_VERDICT_BATCH (type 0x0303), its NFQA_VERDICT_HDR (2): NF_ACCEPT (1), then the id, big-endian."""
    sent = []

    class Socket:
        def send(self, data):
            sent.append(data)

    delay_line.release(Socket(), 0x01020304)
    (message,) = sent
    assert struct.unpack_from("=IH", message) == (32, 0x0303)
    assert message[20:] == struct.pack("=HH", 12, 2) + bytes([0, 0, 0, 1, 1, 2, 3, 4])


def _packet(packet_id, mark_first):
    """A queued packet's message as the kernel sends it: nfgenmsg, maybe a mark (NFQA_MARK, 3) before its
    NFQA_PACKET_HDR (1): the id, big-endian, the hardware protocol and the hook, padded to 4."""
    attributes = struct.pack("=HH", 8, 3) + bytes(4) if mark_first else b""
    attributes += struct.pack("=HH", 11, 1) + struct.pack(">IHB", packet_id, 0x0800, 1) + bytes(1)
    body = bytes([2, 0, 0, 0]) + attributes
    return struct.pack("=IHHII", 16 + len(body), 0x0300, 0, 0, 0) + body


def test_the_ids_of_queued_packets_are_read_from_their_headers_and_nothing_else():
    done = struct.pack("=IHHII", 16, 3, 0, 0, 0)  # NLMSG_DONE, not a packet
    assert delay_line.packet_ids(_packet(7, False) + done + _packet(8, True)) == [7, 8]


def _probe(rate, delay_ms, loss):
    if not shutil.which(hosts.IPTABLES):
        pytest.skip(f"{hosts.IPTABLES} is not installed (Debian: apt-get install iptables; .ci/run does)")
    done = subprocess.run(
        [sys.executable, PROBE, rate, str(delay_ms), str(loss)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
    )
    if done.stdout.startswith("SKIP"):
        pytest.skip(f"no private network namespace here: {done.stdout[5:].strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.cluster
@pytest.mark.parametrize("rate, delay_ms", [("100mbit", 10), ("1gbit", 1)])
def test_a_delayed_link_takes_its_round_trip_and_a_stream_at_its_rate(rate, delay_ms):
    """A round trip crosses the link twice: 2 x the delay, within 10% (the unshaped round trip is 0.02-0.03 ms
    here). A stream of 2 s: within 10% of TCP's payload share of the rate, 1448 of every 1514 bytes, 95.6 Mbit/s
    at 100mbit and 956 at 1gbit (the issue's acceptance; at 1gbit only since a shaped device is handed segments
    that fit its bucket, Link.segment_bytes: before, tbf cut each into packets and the stream made 764-803), less
    the largest share of a CPU the hypervisor took during the stream: the bucket loses that time's tokens
    (training/cpu_steal.py; a CI run measured 81-83 at 100mbit, and 830 at 1gbit after a first probe's 291). Up to
    3 probes, until a stream reaches its bound: the link caps every one."""
    payload = hosts.Link(rate).bits_per_second * 1448 / 1514 / 1e6

    def least(probe):
        return 0.9 * payload * (1 - probe["stolen"])

    probes = [_probe(rate, delay_ms, 0)]
    while probes[-1]["mbit_per_second"] < least(probes[-1]) and len(probes) < 3:
        probes.append(_probe(rate, delay_ms, 0))
    assert {p["delay_by"] for p in probes} <= {hosts.NETEM, hosts.DELAY_LINE}
    assert all(abs(p["round_trip_ms"] - 2 * delay_ms) <= 0.1 * 2 * delay_ms for p in probes), probes
    assert all(p["mbit_per_second"] <= 1.1 * payload for p in probes), probes
    assert probes[-1]["mbit_per_second"] >= least(probes[-1]), probes
    assert sum(p.get("dropped", 0) for p in probes) == 0, probes  # no queue of the delay line overflowed


@pytest.mark.cluster
@pytest.mark.parametrize("delay_ms", [0, 10])
def test_a_lossy_link_drops_its_share_of_the_packets(delay_ms):
    """20,000 datagrams at 1% loss: 200 lost on average, a standard deviation of √(20000 · 0.01 · 0.99) = 14; four
    of them either side is 0.72% to 1.28%. With a delay too: the drop comes before the delay line's queue, as a
    packet the delay line accepts leaves the chain (it once did, and lost none)."""
    measured = _probe("100mbit", delay_ms, 0.01)
    assert 0.0072 <= measured["lost"] <= 0.0128, measured


@pytest.mark.cluster
def test_a_sync_step_on_a_delayed_lossy_link_pays_the_models_delays_and_the_run_finishes(tmp_path):
    """Sync, 2 workers, 100mbit, against the same run with 10 ms one way and 1% loss. Both leave the steps a run
    automatic: the plain run loops ten steps a run, the delayed one runs one, faster there, and says why. The
    network model counts 5 one-way delays a step of a run of one step (tools/network_model.py), 50 ms, so the
    delayed step is slower by at least that, less the model's 15% (the bench measured 45.7 ms more at 10 ms
    without loss, BENCHMARKS.md "Latency"); loss only slows it more. summary.json says the delay, what made it,
    and the loss."""
    if not shutil.which(hosts.IPTABLES):
        pytest.skip(f"{hosts.IPTABLES} is not installed (Debian: apt-get install iptables; .ci/run does)")
    summaries = {}
    for name, link in (("plain", []), ("delayed", ["--link_delay=10", "--link_loss=0.01"])):
        logdir = tmp_path / name
        command = launcher_command(
            "--num_workers=2", "--link_rate=100mbit", *link, "--train_steps=30", "--log_every=10", f"--logdir={logdir}"
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
        if "private network" in done.stderr and done.returncode == 2:
            pytest.skip(done.stderr.strip())
        assert done.returncode == 0, done.stdout + done.stderr
        summaries[name] = json.loads((logdir / "summary.json").read_text())
    declared = summaries["delayed"]["declared"]["link"]
    assert declared["link_delay_by"] in (hosts.NETEM, hosts.DELAY_LINE)  # netem where the kernel has it
    assert declared == {
        "link_rate": "100mbit",
        "bits_per_second": 1e8,
        "link_delay_ms": 10.0,
        "link_delay_by": declared["link_delay_by"],
        "link_loss": 0.01,
    }
    assert f"10 ms one way by {declared['link_delay_by']}, 1.00% of the packets lost" in done.stdout
    assert [summaries[name]["session_runs"] for name in ("plain", "delayed")] == [3, 30]
    assert summaries["delayed"]["one_step_a_run"].startswith("--link_delay=10: on a delayed link a sync step")
    delays = network_ms("sync", 2, 1, 0, 0, 1e8, latency=Latency(10.0))
    assert delays == 50.0
    assert summaries["delayed"]["ms_per_step"] - summaries["plain"]["ms_per_step"] >= 0.85 * delays, summaries


@pytest.mark.cluster
def test_a_run_whose_delay_line_dies_stops_in_one_line_and_leaves_no_task(tmp_path, procs):
    """Without its delay line every packet a host receives is queued to nobody, and the kernel drops it: the
    tasks would wait on their peers until their watchdog. The launcher watches it as it watches the tasks, and
    stops the run at once (a restart would run on links that no longer do what the flags say)."""
    if not shutil.which(hosts.IPTABLES):
        pytest.skip(f"{hosts.IPTABLES} is not installed (Debian: apt-get install iptables; .ci/run does)")
    command = launcher_command(
        "--num_workers=1",
        "--link_rate=100mbit",
        "--link_delay=5",
        "--train_steps=100000",
        "--log_every=20",
        f"--logdir={tmp_path / 'run'}",
    )
    run = procs.start(command)
    said = run.wait_for_line(r"delay line \(pid \d+\)|one way by netem|error:", timeout=60)
    if "delay line" not in said:
        run.proc.kill()
        pytest.skip(f"no delay line here: {said}")  # netem delays, or no private network namespace
    pid = int(re.search(r"pid (\d+)", said).group(1))
    procs.track(pid)
    run.wait_for_line(r"step 20/100000", timeout=90)
    os.kill(pid, signal.SIGKILL)
    assert run.wait(timeout=60) == 1, run.output
    assert f"the delay line (pid {pid}) was killed by signal SIGKILL; stopped the tasks, the links are gone" in (
        run.output
    )
    assert "run the same command" in run.lines[-1], run.output  # what was written so far is kept
    assert run.task_pids and not [name for name, task in run.task_pids.items() if alive(task)], run.task_pids
