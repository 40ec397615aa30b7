"""The simulated hosts' one-way delay where the kernel has no netem: a delay line of netfilter queues.

In each host's namespace, netfilter's NFQUEUE target (iptables' INPUT chain, on eth0: hosts.py adds the rule) hands
every packet the host receives to this process, which holds its verdict for the delay and then accepts it, so the
packet arrives as late as netem would have sent it: the kernel's TCP sees the real round trip. Only the verdicts
cross to user space (NFQNL_COPY_META: no packet's bytes are copied), and the delay is the same for every packet of
a queue, so packets leave in the order they came: one batch verdict lets go every packet up to the last one due.
One process serves every host, a netfilter socket in each one's namespace.

    python -m parallel_tf.launch.delay_line DELAY_MS NAMESPACE...   (prints "ready" once every queue is bound)

The netlink messages are nfnetlink_queue's (linux/netfilter/nfnetlink_queue.h), written out here: the standard
library has the sockets, and libnetfilter_queue's Python bindings need a compiler and its headers. Free of
TensorFlow.
"""

import collections
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import time

from parallel_tf.launch.fence import die_with_parent, enter_network_namespace

NETLINK_NETFILTER = 12
SUBSYSTEM = 3 << 8  # NFNL_SUBSYS_QUEUE, the message type's high byte
PACKET, VERDICT_BATCH, CONFIG = 0, 3, 2  # NFQNL_MSG_*
REQUEST, ACK = 1, 4  # NLM_F_*
ERROR = 2  # NLMSG_ERROR
CONFIG_COMMAND, CONFIG_PARAMS, CONFIG_QUEUE_MAXLEN, CONFIG_MASK, CONFIG_FLAGS = 1, 2, 3, 4, 5  # NFQA_CFG_*
# NFQA_CFG_F_GSO: a segmentation-offloaded packet (up to 64 KB on a veth) is queued whole, not cut to 1500-byte
# packets first: a verdict for each would be 40 times as many
WHOLE_SEGMENTS = 4
BIND = 1  # NFQNL_CFG_CMD_BIND
COPY_META = 1  # NFQNL_COPY_META: the packet's id and headers, none of its bytes
PACKET_HEADER, VERDICT_HEADER = 1, 2  # NFQA_PACKET_HDR, NFQA_VERDICT_HDR
ACCEPT = 1  # NF_ACCEPT
QUEUE = 0  # the queue number of every host's rule (queues are per namespace)
# Packets a queue holds before the kernel drops the next: at least the delay times the packet rate (1 Gbit/s of
# 1500-byte packets for 100 ms is 8,300), with room
QUEUE_LENGTH = 1 << 16
RECEIVE_BUFFER = 1 << 24  # a burst of verdict requests waits here while the loop sleeps
LEARNING = 0.05  # how much of a release's lateness moves the next releases' timing
# A release lets go what is due within this much too, in the same verdict: at a stream's packet rate, one wake
# for a few packets rather than one for each (the learned timing centres them on their due times)
GRANULE = 50e-6
PR_SET_TIMERSLACK = 29  # prctl's: the slack Linux may add to a sleep's end, 50 µs by default; 1 ns here


def _attribute(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind, attributes, flags=REQUEST):
    """An nfnetlink_queue message of `kind` to queue QUEUE: netlink's header, nfgenmsg (AF_UNSPEC, version 0,
    the queue number big-endian), the attributes."""
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(QUEUE)) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), SUBSYSTEM | kind, flags, 0, 0) + body


def bind_queue():
    """A netfilter socket bound to queue QUEUE of this process's namespace, copying no packet's bytes; OSError
    (with the kernel's errno) where the kernel refuses."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.bind((0, 0))
    for attribute in (
        _attribute(CONFIG_COMMAND, struct.pack(">BxH", BIND, 0)),
        _attribute(CONFIG_PARAMS, struct.pack(">IB", 0, COPY_META)),
        _attribute(CONFIG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_LENGTH)),
        _attribute(CONFIG_FLAGS, struct.pack(">I", WHOLE_SEGMENTS))
        + _attribute(CONFIG_MASK, struct.pack(">I", WHOLE_SEGMENTS)),
    ):
        sock.send(_message(CONFIG, [attribute], REQUEST | ACK))
        reply = sock.recv(1 << 16)
        (kind,) = struct.unpack_from("=H", reply, 4)
        (error,) = struct.unpack_from("=i", reply, 16) if kind == ERROR else (0,)
        if error:
            raise OSError(-error, f"nfnetlink_queue refused its configuration: {os.strerror(-error)}")
    sock.setblocking(False)
    return sock


def packet_ids(data):
    """The ids of the packets the kernel queued, from one receive's netlink messages."""
    ids, at = [], 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if kind == SUBSYSTEM | PACKET:
            attribute = at + 20  # past netlink's header and nfgenmsg
            while attribute + 4 <= at + length:
                size, which = struct.unpack_from("=HH", data, attribute)
                if which & 0x3FFF == PACKET_HEADER:
                    ids.append(struct.unpack_from(">I", data, attribute + 4)[0])
                    break
                attribute += max(4, (size + 3) & ~3)
        at += max(16, (length + 3) & ~3)
    return ids


def release(sock, last_id):
    """Accepts every packet of the queue up to `last_id`, in one verdict."""
    sock.send(_message(VERDICT_BATCH, [_attribute(VERDICT_HEADER, struct.pack(">II", ACCEPT, last_id))]))


def hold(sockets, delay_seconds, clock=time.monotonic):
    """Forever: each packet queued on any of `sockets` accepted `delay_seconds` after it reached this process.
    A release comes late by the time the process takes to wake and answer (tens of microseconds, a tenth of a
    millisecond's delay): each is made that much early, by a running mean of the releases' lateness."""
    held: dict = {sock: collections.deque() for sock in sockets}  # (when due, id), in arrival order
    early = 0.0  # how much before its due time a release is made: the releases' mean lateness, so far
    while True:
        now = clock()
        for sock, waiting in held.items():
            last = None
            while waiting and waiting[0][0] - early <= now + GRANULE:
                due, last = waiting.popleft()
            if last is not None:
                release(sock, last)
                early = min(max(0.0, early + (clock() - due) * LEARNING), delay_seconds)  # late: earlier next
        heads = [waiting[0][0] - early - GRANULE for waiting in held.values() if waiting]
        readable, _, _ = select.select(sockets, [], [], max(0.0, min(heads) - clock()) if heads else None)
        arrived = clock()
        for sock in readable:
            while True:
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    break
                except OSError as e:  # ENOBUFS: the kernel dropped messages the buffer had no room for; their
                    if e.errno != errno.ENOBUFS:  # packets wait in its queue, and go with the next batch verdict
                        raise
                    continue
                held[sock].extend((arrived + delay_seconds, packet_id) for packet_id in packet_ids(data))


def main(argv):
    delay_ms, namespaces = float(argv[1]), argv[2:]
    die_with_parent()
    ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    sockets = []
    for namespace in namespaces:  # a socket stays in the namespace it was made in
        enter_network_namespace(namespace)
        sockets.append(bind_queue())
    print("ready", flush=True)
    hold(sockets, delay_ms / 1000.0)


if __name__ == "__main__":
    main(sys.argv)
