"""Simulated hosts: H network namespaces on a private bridge, so a local cluster runs as on H machines.

Inside the launcher's private network (fence.py), each host is a network namespace of its own,
held open by a sleeping process, with one interface `eth0` at 10.77.0.<h+1> joined to the bridge
`ptf0`. Tasks of different hosts listen on the same port numbers and reach each other over the
bridge, as on real machines; nothing outside the launcher's namespace can reach any of them.

Tasks are laid out as a cluster manager with cyclic placement would: ps k on host k mod H, the
local ps of group g on host g mod H, worker i on host i mod H; each listens on PORT_BASE plus its
index on its host. With a link (--link_rate) and no H, every task is on a host of its own.

A link shapes every host's interface in both directions: tc's token bucket (tbf) on `eth0` inside the
host paces what it sends, and on its bridge end `vh<h>` what it receives. The bucket holds 200 µs at
the rate (at least 3000 bytes, two packets): with a larger one a step's messages (38 KB for the MLP)
pass unpaced, with a smaller one tbf cannot keep up above a few hundred Mbit/s. TCP's segments are cut to
half the bucket before they reach it (`Link.segment_bytes`), so tbf paces them whole rather than cutting
each into packets (a TCP stream between two hosts measured 91-95 Mbit/s at 100mbit, 894-913 at 1gbit: the
rest is TCP/IP headers).
--link_delay delays every message once, so a round trip twice: netem in front of the sending end's bucket where
the kernel has it, else our delay line (delay_line.py: netfilter's NFQUEUE on the receiving host's INPUT, each
verdict held for the delay). The delay line holds what arrives, not what leaves: a packet held in its sender's
own stack would count against the sending socket's small queue (TCP Small Queues), which then sends two
packets a delay (4 Mbit/s at 10 ms, measured), where netem lets the socket go. --link_loss drops that share of
the packets each host receives (iptables' statistic match on eth0's INPUT), as a lossy wire would: the
sender's TCP finds out by itself. Free of TensorFlow: the launcher uses it.
"""

import ctypes
import dataclasses
import functools
import select
import shutil
import subprocess
import sys

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.launch.fence import CLONE_NEWNET, die_with_parent, enter_network_namespace
from parallel_tf.training import modes
from parallel_tf.training.options.link import bits_per_second

SUBNET = "10.77.0"
BRIDGE = "ptf0"
PORT_BASE = 2222


def host_address(host):
    return f"{SUBNET}.{host + 1}"


def host_of(address):
    """The index of the simulated host that `address` (10.77.0.<h+1>:port) is on."""
    return int(address.split(":")[0].rsplit(".", 1)[1]) - 1


BURST_SECONDS = 200e-6  # a link's bucket holds this long at its rate
MIN_BURST_BYTES = 3000
# The largest segment TCP hands a device (Linux's GSO_LEGACY_MAX_SIZE, a veth's limit)
LARGEST_SEGMENT = 65536
QUEUE = "500ms"  # what a link queues before it drops: deep, so a step's burst of N messages is delayed, not lost


NETEM, DELAY_LINE = "netem", "delay line (NFQUEUE)"  # what delays a link's packets (Link.delay_by)
IPTABLES = "iptables-legacy"  # the kernel's legacy tables, which this package's rules use
DELAY_LINE_NAME = "the delay line"  # as the launcher names its process
DELAY_LINE_START_SECS = 30  # for the delay line to bind every host's queue


@dataclasses.dataclass(frozen=True)
class Link:
    """A shaped network interface: tc's rate (100mbit), a one-way delay and the share of packets lost."""

    rate: str
    delay_ms: float = 0.0
    loss: float = 0.0

    @property
    def bits_per_second(self):
        return bits_per_second(self.rate)

    @property
    def burst_bytes(self):
        """What its token bucket holds: sent at once after the link idled, then paced at the rate."""
        return max(MIN_BURST_BYTES, int(self.bits_per_second * BURST_SECONDS / 8))

    @property
    def segment_bytes(self):
        """The largest segment a shaped device is handed (its gso_max_size): half its bucket, so that a segment
        with its packets' headers fits whole. tbf cuts a larger one into packets, a timer's wake each: at
        1gbit, a bucket of 25 KB against TCP's 64 KB segments held a stream to 764-803 Mbit/s (and the delay line
        to 70,000 packets a second), where 12.5 KB segments carry 894-913."""
        return min(LARGEST_SEGMENT, self.burst_bytes // 2)

    def qdisc_commands(self, device, delayed):
        """The tc commands that shape what `device` sends; `delayed`: it adds the delay too (a host's own
        interface: a message crosses the sender's and the receiver's end, and is delayed once)."""
        bucket = ["tbf", "rate", self.rate, "burst", str(self.burst_bytes), "latency", QUEUE]
        if not (self.delay_ms and delayed):
            return [["tc", "qdisc", "add", "dev", device, "root", *bucket]]
        return [
            ["tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "netem", "delay", f"{self.delay_ms}ms"],
            ["tc", "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", *bucket],
        ]


def one_host_each(count):
    """The addresses of `count` tasks, each on a host of its own."""
    return [f"{host_address(host)}:{PORT_BASE}" for host in range(count)]


def layout(mode, num_ps, num_workers, num_groups, num_hosts=None):
    """The cluster on `num_hosts` simulated hosts: the i-th task of each job on host i mod H, on the
    next free port of that host (None: every task on a host of its own); jobs and groups assigned as
    everywhere (cluster.assign_jobs)."""
    num_ps, num_groups = modes.server_counts(mode, num_ps, num_groups)
    counts = [num_ps, num_groups, num_workers]  # in start order
    if num_hosts and num_hosts > sum(counts):
        raise ConfigError(
            f"--simulate_hosts={num_hosts} is more than the cluster's {sum(counts)} tasks: "
            f"{num_hosts - sum(counts)} host(s) would hold none"
        )
    used = [0] * (num_hosts or sum(counts))
    addresses: list = []
    for count in counts:
        for index in range(count):
            host = index % num_hosts if num_hosts else len(addresses)
            addresses.append(f"{host_address(host)}:{PORT_BASE + used[host]}")
            used[host] += 1
    return cluster_lib.assign_jobs(addresses, num_ps, num_groups, "the simulated hosts")


class SimulatedHosts:
    """The namespaces of `count` hosts on one bridge, each shaped by `link` if one is given; `enter(h)` is a
    child's preexec_fn onto host h."""

    def __init__(self, count, link=None):
        if not shutil.which("ip"):
            raise ConfigError("--simulate_hosts needs iproute2's `ip` command, which is not installed")
        if link and not shutil.which("tc"):
            raise ConfigError("--link_rate needs iproute2's `tc` command, which is not installed")
        self.holders = []
        self.delay_line = None  # the process of delay_line.py, where it delays the links
        self.delay_by = None  # NETEM or DELAY_LINE, where the links are delayed
        try:
            _ip("link", "add", BRIDGE, "type", "bridge")
            _ip("link", "set", BRIDGE, "up")
            for host in range(count):
                self._add_host(host)
            if link:
                self.delay_by = (link.delay_ms or None) and self._delay_mechanism()
                for host in range(count):
                    self._shape(host, link)
                if link.loss:  # before the delay line's rule: a packet it accepts leaves the chain there
                    self._add_rules(["INPUT", "-i", "eth0", *_random_drop(link.loss)])
                if self.delay_by == DELAY_LINE:
                    self._start_delay_line(link.delay_ms)
        except (OSError, subprocess.CalledProcessError) as e:
            self.stop()
            raise ConfigError(f"--simulate_hosts: could not set up the hosts' network: {_reason(e)}") from None
        except ConfigError:
            self.stop()
            raise

    def _shape(self, host, link):
        """What host `host` sends (its eth0) and receives (the bridge's end of its pair) shaped by `link`."""
        for device, enter in (("eth0", self.enter(host)), (f"vh{host}", None)):
            _ip("link", "set", "dev", device, "gso_max_size", str(link.segment_bytes), preexec_fn=enter)
            for command in link.qdisc_commands(device, delayed=device == "eth0" and self.delay_by == NETEM):
                subprocess.run(command, check=True, capture_output=True, text=True, preexec_fn=enter)

    def _delay_mechanism(self):
        """NETEM where the kernel has it (tried on host 0's eth0), else DELAY_LINE (which refuses in one line
        where it cannot run: never a link without its delay)."""
        probe = ["tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms"]
        if subprocess.run(probe, capture_output=True, preexec_fn=self.enter(0)).returncode == 0:
            subprocess.run(["tc", "qdisc", "del", "dev", "eth0", "root"], check=True, preexec_fn=self.enter(0))
            return NETEM
        return DELAY_LINE

    def _start_delay_line(self, delay_ms):
        """The delay line, bound to every host's queue, then each host's packets sent to it."""
        command = [sys.executable, "-m", "parallel_tf.launch.delay_line", f"{delay_ms:g}"]
        self.delay_line = subprocess.Popen(
            [*command, *map(self.namespace, range(len(self.holders)))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        answers, errors = self.delay_line.stdout, self.delay_line.stderr
        assert answers and errors  # both PIPE
        ready, _, _ = select.select([answers], [], [], DELAY_LINE_START_SECS)
        if not ready or answers.readline().strip() != "ready":
            self.delay_line.kill()
            said = errors.read().strip().splitlines()
            raise ConfigError(f"--link_delay: the delay line did not start: {said[-1] if said else 'no answer'}")
        self._add_rules(["INPUT", "-i", "eth0", "-j", "NFQUEUE", "--queue-num", "0"])

    def _add_rules(self, rule):
        """`rule` (iptables' -A's arguments) on every host."""
        if not shutil.which(IPTABLES):
            raise ConfigError(
                f"--link_delay without the kernel's netem, and --link_loss, need {IPTABLES} (Debian: apt-get "
                "install iptables), which is not installed"
            )
        for host in range(len(self.holders)):
            subprocess.run(
                [IPTABLES, "-w", "-A", *rule], check=True, capture_output=True, text=True, preexec_fn=self.enter(host)
            )

    def _add_host(self, host):
        holder = subprocess.Popen(["sleep", "infinity"], preexec_fn=_unshare_network)
        self.holders.append(holder)
        veth = f"vh{host}"
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid))
        _ip("link", "set", veth, "master", BRIDGE, "up")
        enter = self.enter(host)
        _ip("addr", "add", f"{host_address(host)}/24", "dev", "eth0", preexec_fn=enter)
        _ip("link", "set", "eth0", "up", preexec_fn=enter)
        _ip("link", "set", "lo", "up", preexec_fn=enter)

    def needed(self):
        """{name: process} of what the hosts' links cannot work without while tasks run: the delay line, whose
        death would leave every packet queued to nobody (dropped by the kernel), so the run would stall."""
        return {DELAY_LINE_NAME: self.delay_line} if self.delay_line else {}

    def namespace(self, host):
        """The path of host `host`'s network namespace."""
        return f"/proc/{self.holders[host].pid}/ns/net"

    def enter(self, host):
        """A preexec_fn that moves the child into host `host`'s network namespace."""
        return functools.partial(enter_network_namespace, self.namespace(host))

    def stop(self):
        if self.delay_line:
            self.delay_line.kill()
            self.delay_line.wait()
        for holder in self.holders:
            holder.kill()
            holder.wait()


def _random_drop(share):
    """iptables' arguments that drop `share` of the packets, at random."""
    return ["-m", "statistic", "--mode", "random", "--probability", f"{share:g}", "-j", "DROP"]


def _unshare_network():
    die_with_parent()
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def _ip(*args, preexec_fn=None):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, preexec_fn=preexec_fn)


def _reason(error):
    if isinstance(error, subprocess.CalledProcessError):
        return f"`{' '.join(error.cmd)}`: {error.stderr.strip() or f'exit {error.returncode}'}"
    return str(error)
