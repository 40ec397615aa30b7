"""The fence around a local cluster: a private network namespace that has only loopback (a user
namespace, so no privileges are needed, plus a network namespace), where nothing outside the
cluster can connect to its unauthenticated gRPC servers (cluster/addresses.py) at all.
"""

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

from parallel_tf.backports import pidfd_open
from parallel_tf.cluster.addresses import is_loopback
from parallel_tf.errors import ConfigError

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def fence_off(isolate_network, spec):
    """Enters a private network namespace, unless --isolate_network=off or `spec` (a ClusterConfig or None)
    names an address that is not loopback, before any port is chosen or task started.

    Returns (whether it is fenced, the line that tells the user how the cluster is exposed);
    ConfigError if it must be fenced and cannot.
    """
    if isolate_network == "off":
        return False, "--isolate_network=off: the cluster's ports listen on every interface of this machine"
    named = [address for hosts in spec.jobs.values() for address in hosts] if spec else []
    outside = [address for address in named if not is_loopback(address)]
    why_not = f"the cluster spec names {outside[0]}, not a loopback address" if outside else None
    why_not = why_not or enter_private_network()
    if not why_not:
        return (
            True,
            "the cluster runs in a private network namespace: nothing outside this launcher can reach its ports",
        )
    if isolate_network == "on":
        raise ConfigError(f"--isolate_network=on: cannot isolate the cluster: {why_not}")
    return False, f"no network isolation ({why_not}); the cluster's ports listen on every interface of this machine"


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


def enter_network_namespace(path):
    """Moves this (single-threaded) process into the network namespace at `path` (/proc/PID/ns/net)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _setns(fd, CLONE_NEWNET, f"setns onto {path}")
    finally:
        os.close(fd)


def join_fence_of(pid):
    """Moves this (single-threaded) process into the user and network namespaces of process `pid` (a launcher's
    fence), those it is not in already (setns refuses one's own user namespace)."""
    kinds = 0
    for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET)):
        if os.stat(f"/proc/{pid}/ns/{kind}").st_ino != os.stat(f"/proc/self/ns/{kind}").st_ino:
            kinds |= flag
    if not kinds:
        return
    pidfd = pidfd_open(pid)
    try:
        _setns(pidfd, kinds, f"setns into the namespaces of process {pid}")
    finally:
        os.close(pidfd)


def _setns(fd, kinds, what):
    """setns(2) onto `fd` (a namespace's file, or a pidfd for several `kinds` at once); OSError naming `what`."""
    if ctypes.CDLL(None, use_errno=True).setns(fd, kinds) != 0:
        raise OSError(ctypes.get_errno(), what)


def die_with_parent():
    """In a child (preexec_fn): get SIGTERM if the launcher dies, even by SIGKILL, so nothing is orphaned."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
