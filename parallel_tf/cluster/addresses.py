"""Addresses of a cluster's tasks, and what a task's server exposes.

TensorFlow's gRPC server has no authentication and runs any graph it is sent, and it listens
on every interface (`0.0.0.0:PORT`) whatever host the spec names. So a task whose address is not
loopback warns that its port is open to anyone who can reach it, unless the launcher's fence
(launch/fence.py) put it where nothing else can.

Free of TensorFlow: the launcher uses it.
"""

import errno
import ipaddress
import os
import socket

from parallel_tf.errors import ConfigError

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
        "keep the cluster on a private network or behind a firewall (docs/failures-and-security.md: Security)"
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
