"""A launcher's side of a warm fork server (warm_server.py): asking it for a launch's fork server, watching and
stopping what it forked, and starting one for a block of launches (a study's runs). Free of TensorFlow, as the
launcher is.
"""

import collections
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import parallel_tf
from parallel_tf.backports import pidfd_open, pidfd_send_signal, removeprefix, send_fds
from parallel_tf.launch import fence

SOCKET_VARIABLE = "PARALLEL_TF_WARM_SERVER"  # the path of the Unix socket a launcher finds the server on
# What is read from the environment as TensorFlow, oneDNN, OpenMP, glibc or Python load: a launch whose values
# differ would not load TensorFlow as the server did. PARALLEL_TF_SET says which of them this package pinned.
LOAD_TIME = ("TF_", "TENSORFLOW_", "ONEDNN_", "DNNL_", "OMP_", "KMP_", "MKL_", "GOMP_", "LD_", "MALLOC_", "PYTHON")
PINNED_BY_PARALLEL_TF = "PARALLEL_TF_SET"
UNBUFFERED = "PYTHONUNBUFFERED"  # the server's children write through whatever it says (warm_server)
LENGTH = struct.Struct("!I")  # a request's length, before it
START_TIMEOUT_SECS = 120  # a server that has not answered (loading TensorFlow) after this is taken for dead


def load_time_environment(environ):
    """{variable: value} of `environ` that loading TensorFlow reads."""
    return {
        name: value
        for name, value in environ.items()
        if (name.startswith(LOAD_TIME) or name == PINNED_BY_PARALLEL_TF) and name != UNBUFFERED
    }


def identity(environ, pins):
    """What a launch must share with the server to be forked from it: Python and its environment (a virtualenv's
    own TensorFlow), package, pins (intra_op_threads, kernels; None: not given), the variables read as TensorFlow
    loads. That the code on disk is still what it loaded, the server checks itself (warm_server.loaded_files)."""
    return {
        "python": os.path.realpath(sys.executable),
        "prefix": sys.prefix,
        "package": os.path.dirname(os.path.abspath(parallel_tf.__file__)),
        "pins": list(pins),
        "environment": load_time_environment(environ),
    }


class WarmServerFailed(Exception):
    """A warm server that did not start: the launches load TensorFlow themselves."""


class LaunchServer:
    """The child a warm server forked to be this launch's fork server, watched and stopped as a Popen'd one is."""

    def __init__(self, pid, connection):
        self.pid = pid
        self.returncode = None
        self._connection = connection
        self._pidfd = pidfd_open(pid)

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def _signal(self, signum):
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                pidfd_send_signal(self._pidfd, signum)

    def wait(self, timeout=None):
        """Its exit code once its end of the connection closes: the one it said as it exited; where it said none,
        it was killed, and -SIGKILL stands for the signal, which only the warm server that reaped it saw."""
        if self.returncode is not None:
            return self.returncode
        self._connection.settimeout(timeout)
        said = b""
        try:
            for chunk in iter(lambda: self._connection.recv(4096), b""):
                said += chunk
        except socket.timeout:  # TimeoutError from Python 3.10 on, not before
            raise subprocess.TimeoutExpired("the warm fork server's child", timeout) from None
        words = said.decode().split()
        self.returncode = int(words[1]) if words[:1] == ["exited"] else -signal.SIGKILL
        self._connection.close()
        os.close(self._pidfd)
        return self.returncode


def connect(path, request, write_ends, pins):
    """Asks the warm server at `path` for a fork server serving `request` (forkserver.ForkServer's, which names the
    pipes `write_ends` by their numbers here); returns (LaunchServer, None), or (None, why it did not serve)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError as e:
        connection.close()
        return None, f"nothing listens on {path} ({e.strerror})"
    server_uid = peer(connection).uid
    if server_uid != os.getuid():  # its tasks would run as another user, with this launch's environment
        connection.close()
        return None, f"the server at {path} is another user's (uid {server_uid})"
    message = {
        "identity": identity(os.environ, pins),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "fork_server": request,
    }
    body = json.dumps(message).encode()
    connection.settimeout(START_TIMEOUT_SECS)  # a server loading TensorFlow answers once it has
    try:
        send_fds(connection, [LENGTH.pack(len(body)) + body], [1, 2, *write_ends])
        answer = read_line(connection)
    except socket.timeout:  # TimeoutError from Python 3.10 on; on 3.7 its own class, a traceback if missed
        answer = f"refused it did not answer within {START_TIMEOUT_SECS} s"
    if answer.startswith("served "):
        connection.settimeout(None)
        return LaunchServer(int(answer.split()[1]), connection), None
    connection.close()
    return None, removeprefix(answer, "refused ") or "it closed the connection"


Peer = collections.namedtuple("Peer", "pid uid gid")


def peer(connection):
    """The process at the other end of a Unix socket, as the kernel saw it connect (SO_PEERCRED)."""
    return Peer(*struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)))


def read_line(connection):
    said = b""
    while not said.endswith(b"\n"):
        chunk = connection.recv(1)
        if not chunk:
            break
        said += chunk
    return said.decode().strip()


def say(connection, line):
    connection.sendall(f"{line}\n".encode())


@contextlib.contextmanager
def running(pins=(None, None)):
    """The path of a warm server's socket for the launches of this block (a study's runs, a test session's), for
    them to find in SOCKET_VARIABLE; the server is stopped after. `pins`: as a run's (intra_op_threads,
    kernels), None where not given. WarmServerFailed where it did not start."""
    with tempfile.TemporaryDirectory(prefix="ptf-warm-") as folder:
        path = os.path.join(folder, "socket")
        server = subprocess.Popen(
            [sys.executable, "-u", "-m", "parallel_tf.launch.warm_server", f"--socket={path}", *_pin_flags(pins)],
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=fence.die_with_parent,
        )
        try:
            _wait_for(path, server)
            yield path
        finally:
            server.terminate()
            server.wait()


def _pin_flags(pins):
    threads, kernels = pins
    return [f"--intra_op_threads={threads}"] * (threads is not None) + [f"--kernels={kernels}"] * (kernels is not None)


def _wait_for(path, server):
    deadline = time.monotonic() + START_TIMEOUT_SECS
    while not os.path.exists(path):
        if server.poll() is not None:
            raise WarmServerFailed(f"the warm fork server exited with status {server.returncode} before it listened")
        if time.monotonic() > deadline:
            raise WarmServerFailed(f"the warm fork server did not listen within {START_TIMEOUT_SECS} s")
        time.sleep(0.05)
