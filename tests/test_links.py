"""Links (--link_rate): a simulated host's interface carries what the rate says, a step that moves many
bytes is slowed by what the network model (tools/network_model.py) says, TensorFlow's own strategy (the
bench's peer) runs on the same links, and a link nobody shaped is refused (delays and loss:
tests/test_delay_line.py). They need an unprivileged
user and network namespace; where the kernel refuses one, they skip."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, launcher_command, peers_command

from parallel_tf.launch import hosts
from parallel_tf.tools import bench
from parallel_tf.tools.network_model import network_ms

pytestmark = pytest.mark.cluster
TIMEOUT = 120
# What a step at 10 Mbit/s may take less than the network model says: each direction's token bucket refills while
# the worker computes, and a burst (launch/hosts.py: 3000 bytes at this rate) then passes at once, 2.4 ms a direction
BURSTS_MS = 2 * hosts.Link("10mbit").burst_bytes * 8 / 1e7 * 1000

# A TCP stream of 1 s at the rate given (slow start's and the closing handshake's share small) from host 0 to
# host 1 on simulated hosts shaped at that rate: its Mbit/s and the share of a CPU the hypervisor took meanwhile
# (training/cpu_steal.py), or SKIP and the reason.
TRANSFER = """
import socket, subprocess, sys, time
from parallel_tf.launch import fence, hosts
why = fence.enter_private_network()
if why:
    print("SKIP", why)
    sys.exit(0)
rate = sys.argv[1]
link = hosts.Link(rate)
size = int(link.bits_per_second / 8)
simulated = hosts.SimulatedHosts(2, link)
receiver = subprocess.Popen(
    [sys.executable, "-c", "import socket; s = socket.create_server(('10.77.0.2', 5000)); c, _ = s.accept();"
     "[None for _ in iter(lambda: c.recv(1 << 16), b'')]; c.sendall(b'.')"],
    preexec_fn=simulated.enter(1),
)
sender = subprocess.run(
    [sys.executable, "-c", "import socket, sys, time\\n"
     "for _ in range(50):\\n"
     "    try: s = socket.create_connection(('10.77.0.2', 5000)); break\\n"
     "    except OSError: time.sleep(0.05)\\n"
     "from parallel_tf.training.cpu_steal import Stolen\\n"
     "with Stolen() as stolen:\\n"
     f"    size = {size}; started = time.time(); s.sendall(b'x' * size); s.shutdown(socket.SHUT_WR); s.recv(1)\\n"
     "print(size * 8 / (time.time() - started) / 1e6, stolen.share or 0.0)"],
    preexec_fn=simulated.enter(0), capture_output=True, text=True, timeout=60,
)
receiver.wait(timeout=10)
simulated.stop()
print(sender.stdout.strip() or sender.stderr)
"""


def _transfer(rate):
    """(Mbit/s, stolen share) of one stream."""
    done = subprocess.run(
        [sys.executable, "-c", TRANSFER, rate], capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO
    )
    if done.stdout.startswith("SKIP"):
        pytest.skip(f"no private network namespace here: {done.stdout[5:].strip()}")
    mbit, stolen = done.stdout.strip().splitlines()[-1].split()
    return float(mbit), float(stolen)


def test_a_link_carries_a_stream_at_its_rate():
    """Within 15% of the rate: TCP's payload is 1448 bytes of every 1514 on the wire, 95.6% (92.9-94.7 Mbit/s, 6
    streams of 1 s alone on this Zen 4; 93.5-94.2 three times on another). Its token bucket holds two packets (240
    µs at this rate), so while the virtual CPU that runs its timer is descheduled, the bucket fills and the rest of
    that time's tokens are lost: a CI run's cluster pass once measured 72-79 in three streams. So each stream's
    bound is 85 less the largest share of a CPU the hypervisor took meanwhile (training/cpu_steal.py); up to 3
    streams, until one reaches its bound; the shaper caps every one. (At 1gbit: tests/test_delay_line.py.)"""
    streams = [_transfer("100mbit")]
    while streams[-1][0] < 85 * (1 - streams[-1][1]) and len(streams) < 3:
        streams.append(_transfer("100mbit"))
    assert all(mbit <= 102 for mbit, _ in streams), streams
    assert streams[-1][0] >= 85 * (1 - streams[-1][1]), f"(Mbit/s, share of a CPU stolen): {streams}"


def test_a_step_on_a_slow_link_is_slowed_by_what_the_model_says_and_the_summary_names_the_link(
    tmp_path, from_the_warm_server
):
    """Sync, 1 worker, 10 Mbit/s: the ps sends the MLP's 38 KB of parameters to the worker and takes its
    38 KB gradient back each step, 64 ms at 10 Mbit/s; the step costs that plus an unshaped step's few ms, less
    the buckets' bursts (BURSTS_MS: 64.14 ms was measured once against the model's 64.32). Its tasks are forked by
    the session's warm server, whose child joins the launcher's namespaces and forks each into its shaped host's."""
    logdir = tmp_path / "run"
    command = launcher_command("--link_rate=10mbit", "--num_workers=1", "--train_steps=20", f"--logdir={logdir}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    if "private network" in done.stderr and done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"of the warm server at {from_the_warm_server}" in done.stdout + done.stderr
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["declared"]["link"] == {
        "link_rate": "10mbit",
        "bits_per_second": 1e7,
        "link_delay_ms": 0.0,
        "link_loss": 0.0,
    }
    sent, received = summary["bytes_sent_per_step"], summary["bytes_received_per_step"]
    network = network_ms("sync", 1, 1, sent, received, 1e7)
    assert 60 < network < 70
    assert network - BURSTS_MS <= summary["ms_per_step"] <= network + 25
    # After its first step the chief says what the link makes of a step at least: its busier direction's
    # bytes, the 38,440 of parameters and its report's 8 (its index and loss), at the raw 10 Mbit/s, 30.8 ms
    # (38448 · 8 / 10⁷ s), 615 ms for the 20 steps: a rate far too slow for a run is said, not sat through.
    said = (
        "the chief's link carries 38448 bytes a step each way at most: at 10mbit, at least 30.8 ms a step, "
        "615 ms for the 20 steps"
    )
    assert said in done.stdout


def test_a_peer_runs_on_the_same_link_and_is_slowed_as_a_ring_is(tmp_path):
    """MultiWorkerMirroredStrategy, 2 workers, 10 Mbit/s: its ring sends and receives (N−1)/N of the MLP's
    38 KB gradient twice (reduce-scatter, all-gather), 38 KB each way on each worker's interface, 32 ms a step."""
    logdir = tmp_path / "peer"
    command = peers_command(
        "--strategy=mirrored",
        "--num_workers=2",
        "--link_rate=10mbit",
        "--train_steps=30",
        "--log_every=10",
        f"--logdir={logdir}",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    if "private network namespace" in done.stderr and done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[launch] each of the 2 simulated hosts' interfaces is shaped at 10mbit each way" in done.stdout
    assert json.loads((logdir / "summary.json").read_text())["link"] == {
        "link_rate": "10mbit",
        "bits_per_second": 1e7,
        "link_delay_ms": 0.0,
        "link_loss": 0.0,
    }
    gradient_bytes = 4 * (64 * 128 + 128 + 128 * 10 + 10)  # the MLP's float32 parameters
    network = network_ms("allreduce", 2, 0, gradient_bytes, gradient_bytes, 1e7)
    assert 30 < network < 33
    assert network - BURSTS_MS <= bench.steady_ms_per_step(logdir) <= network + 25
