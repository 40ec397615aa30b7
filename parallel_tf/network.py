"""What a task's server exposes, and how a local cluster is fenced off from the network.

TensorFlow's gRPC server has no authentication and runs any graph it is sent, and it listens
on every interface (`0.0.0.0:PORT`) whatever host the spec names. So:
- a task whose address is not loopback warns that its port is open to anyone who can reach it;
- the launcher runs a local cluster in a private network namespace that has only loopback
  (a user namespace, so no privileges are needed, plus a network namespace), where nothing
  outside the cluster can connect to it at all.

Free of TensorFlow: the launcher uses it.
"""

import ctypes
import errno
import fcntl
import ipaddress
import os
import signal
import socket
import struct
import sys

from parallel_tf.errors import ConfigError

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PRIVATE_NETWORK_ENV = "PARALLEL_TF_PRIVATE_NETWORK"  # "1" in the tasks of a fenced launcher


def host_and_port(address):
    """("host", port) of "host:port"."""
    host, port = address.rsplit(":", 1)
    return host, int(port)


def is_loopback(address):
    """True if "host:port" names this machine's loopback interface."""
    host = host_and_port(address)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(address, environ=os.environ):
    """The warning a task logs when its spec address is reachable from other machines, else None.

    None too for a task the launcher started in its private network (simulated hosts' addresses are
    not loopback, and reachable from nowhere else): the launcher says so in PRIVATE_NETWORK_ENV."""
    if is_loopback(address) or environ.get(PRIVATE_NETWORK_ENV) == "1":
        return None
    return (
        f"this task listens on port {host_and_port(address)[1]} of every interface ({address} in the spec): "
        "TensorFlow's gRPC server accepts unauthenticated graph execution from anyone who can reach it; "
        "keep the cluster on a private network or behind a firewall (README: Security)"
    )


def check_port_free(address, task):
    """Raises ConfigError if the port of `address` is taken: TF's server would fail with a bare
    'Could not start gRPC server' and a screen of gRPC log lines. It binds 0.0.0.0, so this does.

    With SO_REUSEADDR, as gRPC binds: connections of a finished run left in TIME_WAIT do not count
    (a task restarted on its port right away must start), a listener does."""
    port = host_and_port(address)[1]
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            raise ConfigError(
                f"{task}'s port {port} ({address}) is already in use: another cluster, or another task of this one? "
                "Choose free ports"
            ) from None


def enter_private_network():
    """Moves this (single-threaded) process into a new user + network namespace with loopback up,
    as `unshare --user --map-root-user --net` followed by `ip link set lo up` would.

    Its children inherit it: servers listening inside can be reached from inside only. Returns
    None on success, or why the kernel refused (e.g. unprivileged user namespaces disabled).
    Raises ConfigError if the namespace was entered but could not be set up: there is no going
    back, and a cluster in a network without loopback could not run.
    """
    if not sys.platform.startswith("linux"):
        return "network namespaces exist on Linux only"
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWUSER | CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        _bring_up_loopback()
    except OSError as e:
        raise ConfigError(
            f"entered a private network namespace but could not set it up ({e}); use --isolate_network=off"
        ) from None
    return None


def _write(path, text):
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _bring_up_loopback():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def die_with_parent():
    """In a child (preexec_fn): get SIGTERM if the launcher dies, even by SIGKILL, so nothing is orphaned."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
