"""Simulated hosts: H network namespaces on a private bridge, so a local cluster runs as on H machines.

Inside the launcher's private network (fence.py), each host is a network namespace of its own,
held open by a sleeping process, with one interface `eth0` at 10.77.0.<h+1> joined to the bridge
`ptf0`. Tasks of different hosts listen on the same port numbers and reach each other over the
bridge, as on real machines; nothing outside the launcher's namespace can reach any of them.

Tasks are laid out as a cluster manager with cyclic placement would: ps k on host k mod H, the
local ps of group g on host g mod H, worker i on host i mod H; each listens on PORT_BASE plus its
index on its host. Free of TensorFlow: the launcher uses it.
"""

import ctypes
import os
import shutil
import subprocess

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.launch.fence import CLONE_NEWNET, die_with_parent
from parallel_tf.training import modes

SUBNET = "10.77.0"
BRIDGE = "ptf0"
PORT_BASE = 2222


def host_address(host):
    return f"{SUBNET}.{host + 1}"


def host_of(address):
    """The index of the simulated host that `address` (10.77.0.<h+1>:port) is on."""
    return int(address.split(":")[0].rsplit(".", 1)[1]) - 1


def layout(mode, num_ps, num_workers, num_groups, num_hosts):
    """The cluster on `num_hosts` simulated hosts: the i-th task of each job on host i mod H, on the
    next free port of that host; jobs and groups assigned as everywhere (cluster.assign_jobs)."""
    num_ps, num_groups = modes.server_counts(mode, num_ps, num_groups)
    counts = [num_ps, num_groups, num_workers]  # in start order
    used = [0] * num_hosts
    addresses = []
    for count in counts:
        for index in range(count):
            host = index % num_hosts
            addresses.append(f"{host_address(host)}:{PORT_BASE + used[host]}")
            used[host] += 1
    return cluster_lib.assign_jobs(addresses, num_ps, num_groups, "the simulated hosts")


class SimulatedHosts:
    """The namespaces of `count` hosts on one bridge; `enter(h)` is a child's preexec_fn onto host h."""

    def __init__(self, count):
        if not shutil.which("ip"):
            raise ConfigError("--simulate_hosts needs iproute2's `ip` command, which is not installed")
        self.holders = []
        try:
            _ip("link", "add", BRIDGE, "type", "bridge")
            _ip("link", "set", BRIDGE, "up")
            for host in range(count):
                self._add_host(host)
        except (OSError, subprocess.CalledProcessError) as e:
            self.stop()
            raise ConfigError(f"--simulate_hosts: could not set up the hosts' network: {_reason(e)}") from None

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

    def enter(self, host):
        """A preexec_fn that moves the child into host `host`'s network namespace."""
        path = f"/proc/{self.holders[host].pid}/ns/net"

        def enter_host():
            fd = os.open(path, os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns onto simulated host {host}")
            finally:
                os.close(fd)

        return enter_host

    def stop(self):
        for holder in self.holders:
            holder.kill()
            holder.wait()


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
