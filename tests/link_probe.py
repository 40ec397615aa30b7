"""What two simulated hosts' link does, measured from inside the launcher's private network: a ping-pong's round
trip, a bulk transfer's rate, and the share of UDP datagrams lost, host 0 to host 1. Run as a script of its own
(it enters a private network namespace); prints one JSON line, or SKIP and the reason.

    python tests/link_probe.py RATE DELAY_MS LOSS
"""

import json
import os
import subprocess
import sys

from parallel_tf.launch import fence, hosts

PORT = 5000
PINGS = 40
DATAGRAMS = 20000

# On host 1: echo each byte of a TCP connection (the ping-pong), then take a stream and answer its end (the
# transfer), then count UDP datagrams for a second after the last (the loss).
SERVER = f"""
import socket, sys
listener = socket.create_server(("10.77.0.2", {PORT}))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("10.77.0.2", {PORT}))
print("listening", flush=True)
echo, _ = listener.accept()
echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range({PINGS}):
    echo.sendall(echo.recv(1))
bulk, _ = listener.accept()
while bulk.recv(1 << 20):
    pass
bulk.sendall(b".")
udp.settimeout(2.0)
count = 0
try:
    while True:
        udp.recv(64)
        count += 1
        udp.settimeout(1.0)
except socket.timeout:
    pass
print(count, flush=True)
"""


def probe(rate, delay_ms, loss):
    link = hosts.Link(rate, delay_ms, loss)
    simulated = hosts.SimulatedHosts(2, link)
    try:
        return _measure(simulated, link)
    finally:
        simulated.stop()


# On host 0: the ping-pong's rounds (their median after the connection's first), the transfer of 2 s at the rate
# (slow start's share small) and the share of a CPU's time the hypervisor took meanwhile, then the datagrams, paced.
CLIENT = f"""
import json, socket, statistics, sys, time
from parallel_tf.training.cpu_steal import Stolen
for _ in range(100):
    try:
        echo = socket.create_connection(("10.77.0.2", {PORT}))
        break
    except OSError:
        time.sleep(0.05)
echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rounds = []
for _ in range({PINGS}):
    started = time.perf_counter()
    echo.sendall(b"x")
    echo.recv(1)
    rounds.append((time.perf_counter() - started) * 1000)
size = int(float(sys.argv[1]) * 2.0 / 8)
bulk = socket.create_connection(("10.77.0.2", {PORT}))
with Stolen() as stolen:
    started = time.perf_counter()
    bulk.sendall(b"x" * size)
    bulk.shutdown(socket.SHUT_WR)
    bulk.recv(1)
    seconds = time.perf_counter() - started
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range({DATAGRAMS}):
    udp.sendto(b"d" * 32, ("10.77.0.2", {PORT}))
    time.sleep(0.00005)
round_trip = statistics.median(rounds[{PINGS} // 4 :])
print(json.dumps({{"round_trip_ms": round_trip, "mbit_per_second": size * 8 / seconds / 1e6,
                  "stolen": stolen.share or 0.0}}))
"""


def _measure(simulated, link):
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True, preexec_fn=simulated.enter(1)
    )
    try:
        assert server.stdout.readline().strip() == "listening"
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, str(link.bits_per_second)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=simulated.enter(0),
        )
        measured = json.loads(client.stdout)
        received = int(server.stdout.readline())
        return {**measured, "lost": 1 - received / DATAGRAMS, "delay_by": simulated.delay_by, **_cost(simulated)}
    finally:
        server.kill()
        server.wait()


def _cost(simulated):
    """What the delay line did over the whole probe: the packets its queues took (id_sequence, the 8th column of
    /proc/net/netfilter/nfnetlink_queue, in each host's namespace), the ones they dropped, and its CPU seconds."""
    if not simulated.delay_line:
        return {}
    queued = dropped = 0
    for host in range(len(simulated.holders)):
        table = subprocess.run(
            ["cat", "/proc/net/netfilter/nfnetlink_queue"],
            capture_output=True,
            text=True,
            preexec_fn=simulated.enter(host),
        ).stdout.split()
        queued, dropped = queued + int(table[7]), dropped + int(table[5]) + int(table[6])
    with open(f"/proc/{simulated.delay_line.pid}/stat") as f:
        ticks = sum(int(field) for field in f.read().rsplit(")", 1)[1].split()[11:13])
    return {"queued": queued, "dropped": dropped, "delay_line_cpu_s": ticks / os.sysconf("SC_CLK_TCK")}


if __name__ == "__main__":
    why = fence.enter_private_network()
    if why:
        print("SKIP", why)
        sys.exit(0)
    print(json.dumps(probe(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))))
