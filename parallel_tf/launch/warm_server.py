"""A fork server that outlives a launch: TensorFlow loaded once for many launches (a study's, a shell's).

A short launch's time is mostly TensorFlow's import in its fork server (forkserver.py): a 500-step run of 2 workers
took 2.9 s from this server, 5.5 s loading its own (BENCHMARKS.md, "Starting the tasks"). This server loads it once
and listens on a Unix socket; a launcher that finds it
(PARALLEL_TF_WARM_SERVER, the socket's path) sends it the fork server's request with the pipes' write ends. The
server forks a child for the launch, which is what the launcher's own fork server would have been: it joins the
launcher's user and network namespaces (the fence; a fork's child is single-threaded, as setns needs), takes its
environment, working directory and output, then forks the tasks and reports them on the launcher's pipe.

It serves only a launch that would load TensorFlow exactly as it did: the same Python, virtualenv and package, the
files of every module and shared library it loaded (the package's, TensorFlow's, numpy's...) unchanged since it
loaded them (after an edit, a pull or an upgrade under it, its forks would run the old code), the same --kernels
and the same values of every variable read as TensorFlow, oneDNN, OpenMP or Python load (LOAD_TIME); else it
says why and the launcher loads TensorFlow in a fork server of its own. The bits are the
same either way (tests/test_warm_server.py). The launch's child stops when the launcher's connection
closes (the launcher died, even by SIGKILL), and its tasks with it (fence.die_with_parent).

    python -m parallel_tf.launch.warm_server --socket="$HOME/.parallel_tf.sock" &
    PARALLEL_TF_WARM_SERVER="$HOME/.parallel_tf.sock" python -m parallel_tf.launch --num_workers=2
"""

import contextlib
import io
import json
import os
import signal
import socket
import stat
import sys
import threading
import traceback
import typing

from absl import flags

from parallel_tf import compat
from parallel_tf.backports import recv_fds, zip_strict
from parallel_tf.cli import exit_config_error
from parallel_tf.errors import ConfigError
from parallel_tf.launch import fence, forkserver
from parallel_tf.launch.warm_client import LENGTH, identity, load_time_environment, peer, say

MAPPED = "/proc/self/maps"  # the files this process has mapped: its shared libraries among them
MAX_FDS = 256  # a launch passes its stdout, stderr, report pipe and one output pipe a task
REQUEST_TIMEOUT_SECS = 10  # a launcher that connected and sent nothing by then holds up no other launch


def listen(path):
    """A Unix socket listening at `path`, its owner's alone: whoever connects has the server run a recipe of their
    choosing as its user. A socket left there by a server that has gone is replaced; any other file is refused
    (ConfigError)."""
    if os.path.exists(path):
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            raise ConfigError(f"--socket={path} is a file that is not a socket")
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(16)
    return listener


def serve_forever(listener, pins):
    """Loads TensorFlow pinned by `pins` (intra_op_threads, kernels), then forks a child for each launch that
    connects to `listener`; returns only in a child: (the fork server's request it serves, the connection)."""
    ours = identity(os.environ, pins)
    forkserver.load_tensorflow(*pins)
    ours["pins"] = [compat.intra_op_threads(), compat.kernels()]  # what it loaded with: a launch's None is these
    loaded = loaded_files(sys.modules, MAPPED)
    loading_set = _changed(ours["environment"], load_time_environment(os.environ))  # the pins among them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a launch's child is reaped by the kernel
    print(f"warm fork server: TensorFlow loaded; serving launches (pid {os.getpid()})", flush=True)
    while True:
        connection, _ = listener.accept()
        served = _served(connection, ours, loaded)
        if served and os.fork() == 0:
            listener.close()
            for signum, handler in {signal.SIGCHLD: signal.SIG_DFL, **STOPPING}.items():
                signal.signal(signum, handler)
            request, fds = served
            return _in_the_launchers_place(connection, request, fds, loading_set)
        connection.close()
        for fd in served[1] if served else ():
            os.close(fd)


def _served(connection, ours, loaded):
    """(request, fds) of a launch this server can serve; None where it refused it, saying why, or where the
    launcher went as it asked (the next one is served)."""
    try:
        connection.settimeout(REQUEST_TIMEOUT_SECS)
        request, fds = _receive(connection)
        connection.settimeout(None)
        why_not = _why_not(ours, request["identity"]) or _changed_on_disk(loaded)
        if not why_not:
            return request, fds
        for fd in fds:
            os.close(fd)
        say(connection, f"refused {why_not}")
    except (OSError, ValueError) as e:
        print(f"warm fork server: a request was dropped: {e}", file=sys.stderr, flush=True)
    return None


def _why_not(ours, theirs):
    for key in ("python", "prefix", "package"):
        if ours[key] != theirs[key]:
            return f"its {key} is {theirs[key]}, the server's {ours[key]}"
    loaded, given = ours["pins"][1], theirs["pins"][1]  # the kernels; the thread count is the launch's own
    if given is not None and given != loaded:
        return f"--kernels={given}, and the server loaded TensorFlow with {loaded}"
    differ = sorted(_changed(ours["environment"], theirs["environment"]))
    return f"its environment differs in {', '.join(differ)}" if differ else None


def loaded_files(modules, mapped):
    """{path: (size, modification time)} of the file of each of `modules` (sys.modules: every module this process
    imported) and of each file `mapped` lists (/proc/self/maps: the shared libraries it loaded, TensorFlow's
    included): what its forks run, whatever is on disk by the time they start."""
    with open(mapped) as maps:
        libraries = {line.split(None, 5)[5].strip() for line in maps if " /" in line}
    imported = {module.__file__ for module in list(modules.values()) if getattr(module, "__file__", None)}
    versions = {path: _version(path) for path in imported | libraries}
    return {path: version for path, version in versions.items() if version}  # not a deleted library's


def _changed_on_disk(loaded):
    """Why a fork of this server would run other code than a launch loading its own: files of `loaded`
    (loaded_files) changed since, as `pip install -U numpy` under a running server changes numpy's; else None."""
    changed = sorted(path for path, seen in loaded.items() if _version(path) != seen)
    if changed:
        return f"{len(changed)} of the files it loaded code from changed since ({changed[0]} among them): restart it"
    return None


def _version(path):
    """(size, modification time) of the file at `path`; None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


def _changed(before, after):
    """{name: its value in `after` (None: unset)} of the variables whose values differ."""
    return {name: after.get(name) for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def _in_the_launchers_place(connection, request, fds, loading_set):
    """_become_launch_server's, or, where the child cannot take the launcher's namespaces, directory or output, its
    exit with the reason said to the launcher, which then loads its own TensorFlow."""
    try:
        return _become_launch_server(connection, request, fds, loading_set)
    except OSError as e:
        say(connection, f"refused its child could not take the launcher's place: {e}")
        os._exit(1)


def _become_launch_server(connection, request, fds, loading_set):
    """In the launch's child: the launcher's namespaces, environment (with what loading TensorFlow set, as in the
    launcher's own fork server), directory and output, a watch on the launcher; returns the fork server's request
    with the received pipes in it, and the connection."""
    os.setsid()  # as forkserver's own: Ctrl-C reaches the launcher only
    fence.join_fence_of(peer(connection).pid)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    for name, value in loading_set.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    threads = request["identity"]["pins"][0]
    if threads is not None:  # read as each task's first session starts, not as TensorFlow loaded
        compat.repin_threads(threads)
    stdout, stderr, report, *outputs = fds
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.close(stdout)
    os.close(stderr)
    for stream in (sys.stdout, sys.stderr):  # as `python -u`: a task's lines reach the launcher as printed
        typing.cast(io.TextIOWrapper, stream).reconfigure(write_through=True)
    served = request["fork_server"]
    served["report_fd"] = report
    for task, output in zip_strict(served["tasks"], outputs):
        task["output_fd"] = output
    say(connection, f"served {os.getpid()}")
    served["close_in_tasks"] = [connection.fileno()]
    return served, connection


def _watch_launcher(connection):
    """Ends this process, and so its tasks, once the launcher's end of `connection` closes."""

    def watch():
        while connection.recv(1):
            pass
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _receive(connection):
    """(The launcher's request, the fds it passed); OSError (TimeoutError, ConnectionError) where it stopped part
    way, the fds received closed."""
    data, fds, _, _ = recv_fds(connection, 1 << 16, MAX_FDS)
    try:
        while len(data) < LENGTH.size or len(data) < LENGTH.size + LENGTH.unpack_from(data)[0]:
            more = connection.recv(1 << 16)
            if not more:
                raise ConnectionError("the launcher closed the connection part way through its request")
            data += more
        return json.loads(data[LENGTH.size :]), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def main(argv):
    """The command line, its flags its own (the tasks it forks define theirs in absl's FLAGS, as they start)."""
    values = flags.FlagValues()
    flags.DEFINE_string("socket", None, "The Unix socket's path to listen on.", flag_values=values)
    flags.DEFINE_integer(
        "intra_op_threads",
        None,
        "What it loads TensorFlow with (default: the environment's, else 2); each launch's tasks take their own.",
        lower_bound=1,
        flag_values=values,
    )
    flags.DEFINE_enum("kernels", None, list(compat.KERNELS), "As a run's (default: portable).", flag_values=values)
    if {"-h", "--help", "--helpfull"} & set(argv[1:]):
        print(f"{__doc__}\nflags:\n{values.get_help()}")
        return
    try:
        extra = values(argv)[1:]
    except flags.Error as e:
        exit_config_error(str(e))
    if extra or not values.socket:
        exit_config_error(f"unexpected argument {extra[0]!r}" if extra else "--socket: give the path to listen on")
    try:
        listener = listen(values.socket)
    except ConfigError as e:
        exit_config_error(str(e))
    except OSError as e:
        exit_config_error(f"--socket={values.socket}: {e.strerror}")
    _remove_when_stopped(values.socket)
    _run_launch(*serve_forever(listener, (values.intra_op_threads, values.kernels)))


# The signals that stop the server, and the handler each had before it: what a launch's child takes back.
STOPPING: dict = {
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
    signal.SIGINT: signal.default_int_handler,
}


def _remove_when_stopped(path):
    """SIGTERM, Ctrl-C or a closed terminal end the server with its socket file removed, where it is still this
    server's (a later server may have taken the path over), so the next launch finds no socket of a server that
    has gone. A launch's child takes the signals' defaults back as it is forked (serve_forever)."""
    ours = os.stat(path).st_ino

    def stop(signum, frame):
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:
                os.unlink(path)
        os._exit(128 + signum)

    for signum in STOPPING:
        signal.signal(signum, stop)


def _run_launch(served, connection):
    """In a launch's child: its tasks forked and reported as they exit, the launcher watched once they are (a thread,
    started after the forks), then its own exit said to the launcher, as
    a fork server's exit code: 0, or 1 where forking failed (its traceback on the launcher's stderr). In a task:
    the task's recipe, the connection's fd closed as the task started (fork_tasks)."""
    try:
        task = forkserver.fork_tasks(served, once_forked=lambda: _watch_launcher(connection))
    except Exception:
        traceback.print_exc()
        say(connection, "exited 1")
        os._exit(1)
    if task:
        connection.detach()
        forkserver.run_task(task)
        return
    say(connection, "exited 0")
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
