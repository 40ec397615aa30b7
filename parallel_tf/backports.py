"""What Python 3.8 to 3.10 added that this package uses, for Python 3.7 (TensorFlow 1.15's): each the standard
library's where it has it, else a few lines of ours with its meaning. Nothing else in the package asks which Python
it runs on."""

import functools
import itertools
import math
import operator
import os
import shlex
import signal
import socket
import sys
from typing import TYPE_CHECKING

if sys.version_info >= (3, 8):
    from typing import Protocol, TypedDict
else:
    from typing_extensions import Protocol, TypedDict

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
elif TYPE_CHECKING:  # a type checker on 3.8-3.10 reads PEP 681 from typing_extensions (mypy's own requirement)
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_):
        """A mark for type checkers alone (PEP 681), which read it as Python 3.11's: nothing at run time."""
        return lambda cls: cls


__all__ = ["Protocol", "TypedDict", "dataclass_transform"]

cache = getattr(functools, "cache", functools.lru_cache(maxsize=None))


def zip_strict(*iterables):
    """zip(*iterables, strict=True): ValueError where one runs out before another."""
    if sys.version_info >= (3, 10):
        return zip(*iterables, strict=True)
    return _zip_strict(iterables)


def _zip_strict(iterables):
    missing = object()
    for items in itertools.zip_longest(*iterables, fillvalue=missing):
        if any(item is missing for item in items):
            raise ValueError("zip_strict: the iterables have different lengths")
        yield items


def prod(values):
    """math.prod: the product of `values`, 1 for none."""
    return functools.reduce(operator.mul, values, 1)


isqrt = getattr(math, "isqrt", lambda n: int(math.sqrt(n)) - (int(math.sqrt(n)) ** 2 > n))


def shlex_join(words):
    """shlex.join: a command line a shell reads back as `words`."""
    return " ".join(shlex.quote(word) for word in words)


def removeprefix(text, prefix):
    """str.removeprefix."""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def removesuffix(text, suffix):
    """str.removesuffix."""
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


def waitstatus_to_exitcode(status):
    """os.waitstatus_to_exitcode: a process's exit code, or minus the signal that ended it."""
    if hasattr(os, "waitstatus_to_exitcode"):
        return os.waitstatus_to_exitcode(status)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def send_fds(sock, buffers, fds):
    """socket.send_fds: `buffers` with the file descriptors `fds` (SCM_RIGHTS)."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(_ints(fds))))] if fds else []
    return sock.sendmsg(buffers, ancillary)


def recv_fds(sock, bufsize, maxfds):
    """socket.recv_fds: (data, the file descriptors received, flags, address)."""
    size = socket.CMSG_SPACE(maxfds * _ints([]).itemsize)
    data, ancillary, flags, address = sock.recvmsg(bufsize, size)
    fds = _ints([])
    for level, kind, payload in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds), flags, address


def _ints(values):
    import array  # here: only the fd passing of the warm server needs it

    return array.array("i", values)


# Linux's system call numbers for pidfds, the same on every architecture but alpha (they came after the numbering
# was unified, in Linux 5.1 and 5.3)
_PIDFD_SEND_SIGNAL, _PIDFD_OPEN = 424, 434


def pidfd_open(pid):
    """os.pidfd_open: a file descriptor that refers to process `pid` (Linux 5.3 and later)."""
    if hasattr(os, "pidfd_open"):
        return os.pidfd_open(pid)
    return _syscall(_PIDFD_OPEN, pid, 0)


def pidfd_send_signal(pidfd, signum):
    """signal.pidfd_send_signal: `signum` to the process `pidfd` refers to, never a later one given its number."""
    if hasattr(signal, "pidfd_send_signal"):
        return signal.pidfd_send_signal(pidfd, signum)
    _syscall(_PIDFD_SEND_SIGNAL, pidfd, signum, None, 0)
    return None


def _syscall(number, *args):
    import ctypes  # here: only Python 3.7 comes this way

    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(number, *args)
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result
