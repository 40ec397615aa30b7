"""Waiting for the other tasks of a cluster to come up, with a deadline.

Without this a worker whose parameter server is not running waits forever in TF's session
creation, and says nothing (its retries are logged below TF_CPP_MIN_LOG_LEVEL=2). Here it polls
each peer's port, says once whom it is waiting for, and gives up after --startup_timeout,
naming every task it could not reach.
"""

import socket
import time

from absl import logging

from parallel_tf.cluster.addresses import host_and_port
from parallel_tf.errors import TaskFailure

POLL_SECS = 0.1  # between looks: a task starts this soon after its peers listen (a look is one TCP connect)
CONNECT_TIMEOUT_SECS = 0.5  # a peer that takes longer to accept counts as not there yet
ANNOUNCE_AFTER_SECS = 5.0


def wait_until_reachable(peers, timeout_secs):
    """Returns once every {name: "host:port"} in `peers` accepts a TCP connection."""
    started = time.time()
    announced = False
    waiting = dict(peers)
    while True:
        waiting = {name: address for name, address in waiting.items() if not accepts(address)}
        if not waiting:
            return
        elapsed = time.time() - started
        if elapsed >= timeout_secs:
            missing = ", ".join(f"{name} at {address}" for name, address in waiting.items())
            raise TaskFailure(f"cannot reach {missing} within --startup_timeout={timeout_secs:g}s; is it running?")
        if not announced and elapsed >= ANNOUNCE_AFTER_SECS:
            logging.info("waiting for %s", ", ".join(f"{n} at {a}" for n, a in waiting.items()))
            announced = True
        time.sleep(POLL_SECS)


def accepts(address):
    """True if something listens at "host:port": the cheapest sign that a task is still running."""
    try:
        with socket.create_connection(host_and_port(address), timeout=CONNECT_TIMEOUT_SECS):
            return True
    except OSError:
        return False
