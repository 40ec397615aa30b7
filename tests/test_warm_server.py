"""The warm fork server (launch/warm_server.py): launches forked from it end on the bits of a launch that loads
TensorFlow itself, one after another from the same server, and a launch that would load TensorFlow otherwise is
refused with the reason and loads its own. Its edges: a launcher with no server, or with one that does not
start, stalls or stops answering, loads its own; the socket is its owner's alone, and a server of another user's
is refused; a server whose loaded files changed on disk refuses every launch, naming one; a child that cannot
take the launcher's place says why and exits, and one that fails to fork its tasks exits 1 with the traceback."""

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import RUN_TIMEOUT, launcher_command, read_summary

from parallel_tf import compat
from parallel_tf.backports import send_fds, waitstatus_to_exitcode
from parallel_tf.launch import warm_client, warm_server
from parallel_tf.tools import runs

FLAGS = ["--num_workers=2", "--train_steps=20", "--log_every=10"]


@pytest.mark.cluster
def test_launches_from_the_warm_server_end_on_the_bits_of_a_launch_that_loads_its_own(procs, tmp_path, monkeypatch):
    """As from a shell: nothing pinned in the environment, the server's pins set as it loads, given to its launches."""
    for name in (*compat.KERNEL_VARIABLES, compat.INTRA_OP_THREADS, compat.SET_BY_PARALLEL_TF):
        monkeypatch.delenv(name, raising=False)
    own = procs.start(launcher_command(f"--logdir={tmp_path / 'own'}", *FLAGS))
    assert own.wait(RUN_TIMEOUT) == 0, own.output
    assert "[launch] loading TensorFlow once for the 3 tasks, in a fork server (pid" in own.output
    served = []
    with warm_client.running() as path:
        monkeypatch.setenv(warm_client.SOCKET_VARIABLE, path)
        # The server outlives a launch, what it forks starts from its state, and the pins it loaded with are its.
        for name, pins in (("warm", []), ("warm again", ["--intra_op_threads=2", "--kernels=portable"])):
            run = procs.start(launcher_command(f"--logdir={tmp_path / name}", *FLAGS, *pins))
            assert run.wait(RUN_TIMEOUT) == 0, run.output
            said = f"[launch] forking the 3 tasks in a fork server (pid {run.fork_server_pids[0]}) of the warm server"
            assert f"{said} at {path}" in run.lines
            served.append(run.fork_server_pids[0])
    assert served[0] != served[1]
    hashes = {read_summary(tmp_path / name)["params_sha256"] for name in ("own", "warm", "warm again")}
    assert len(hashes) == 1


@pytest.mark.cluster
def test_a_launch_the_warm_server_cannot_serve_says_why_and_loads_tensorflow_itself(procs, tmp_path, warm_server):
    environment = {warm_client.SOCKET_VARIABLE: warm_server, "MALLOC_ARENA_MAX": "2"}  # read as glibc starts
    run = procs.start(launcher_command(f"--logdir={tmp_path}", "--num_workers=1", "--train_steps=5"), environment)
    assert run.wait(RUN_TIMEOUT) == 0, run.output
    assert "[launch] the warm fork server did not take this launch: its environment differs in MALLOC_ARENA_MAX" in (
        run.lines
    )
    assert "[launch] loading TensorFlow once for the 2 tasks, in a fork server (pid" in run.output


@pytest.mark.cluster
def test_a_server_stopped_by_sigterm_removes_its_socket(procs, tmp_path):
    """So the next launch finds no socket of a server that has gone (it would say so, and load its own)."""
    path = tmp_path / "socket"
    server = procs.start([sys.executable, "-m", "parallel_tf.launch.warm_server", f"--socket={path}"])
    server.wait_for_line("serving launches", RUN_TIMEOUT)
    assert path.is_socket()
    server.proc.terminate()
    assert server.wait(RUN_TIMEOUT) == 128 + signal.SIGTERM
    assert not path.exists()


SERVERS = {
    "python": "/usr/bin/python3",
    "prefix": "/src/.venv",
    "package": "/src/parallel_tf",
    "pins": [2, "portable"],
}


@pytest.mark.parametrize(
    "launch, refusal",
    [
        ({}, None),
        ({"pins": [None, None]}, None),  # not given: the server's
        ({"pins": [2, None]}, None),
        ({"python": "/opt/python3"}, "its python is /opt/python3, the server's /usr/bin/python3"),
        ({"prefix": "/other/.venv"}, "its prefix is /other/.venv, the server's /src/.venv"),  # its own TensorFlow
        ({"package": "/work/parallel_tf"}, "its package is /work/parallel_tf, the server's /src/parallel_tf"),
        ({"pins": [4, None]}, None),  # the thread count is the launch's own: compat.repin_threads
        ({"pins": [None, "fast"]}, "--kernels=fast, and the server loaded TensorFlow with portable"),
        ({"environment": {}}, "its environment differs in TF_ENABLE_ONEDNN_OPTS"),
        (
            {"environment": {"TF_ENABLE_ONEDNN_OPTS": "0", "ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}},
            "its environment differs in OMP_NUM_THREADS, ONEDNN_MAX_CPU_ISA",
        ),
    ],
)
def test_the_server_refuses_a_launch_that_would_load_tensorflow_otherwise_naming_why(launch, refusal):
    ours = {**SERVERS, "environment": {"TF_ENABLE_ONEDNN_OPTS": "0"}}
    assert warm_server._why_not(ours, {**ours, **launch}) == refusal


def test_a_server_whose_code_changed_on_disk_refuses_a_launch_naming_a_file(tmp_path):
    """An edit, a pull, or an upgrade under a running server (pip install -U numpy): its forks would run the old
    code, so even a launch of the server's own identity is refused, told why, and the pipe it passed closed. It
    watches the file of every module it imported and every shared library it mapped (/proc/self/maps), and
    nothing else: a module it never imported, new or not, a task imports from disk."""
    module, gone, library, new = (tmp_path / name for name in ("module.py", "gone.py", "_ops.so", "new.py"))
    for path in (module, gone, library, new):
        path.write_text("x = 1\n")
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f00-7f01 r-xp 00000000 08:01 1 {library}\n"
        "7f01-7f02 rw-p 00000000 00:00 0\n"
        "7f02-7f03 rw-p 00000000 00:00 0 [heap]\n"
        f"7f03-7f04 r-xp 00000000 08:01 2 {tmp_path / 'replaced.so'} (deleted)\n"
    )
    modules = {name: SimpleNamespace(__file__=str(path)) for name, path in (("module", module), ("gone", gone))}
    loaded = warm_server.loaded_files({**modules, "sys": sys}, maps)  # a built-in has no file, a deleted library none
    assert sorted(loaded) == sorted(map(str, (module, gone, library)))
    ours = {**SERVERS, "environment": {}}
    request, fds = _asked(ours, loaded)
    assert request == {"identity": ours} and len(fds) == 1
    os.close(fds[0])
    new.write_text("x = 2\n")
    _, (fd,) = _asked(ours, loaded)
    os.close(fd)
    os.utime(library, ns=(0, 0))  # rebuilt, the same size: its time moves
    gone.unlink()
    module.write_text("x = 22\n")
    said = _asked(ours, loaded)
    assert said == f"refused 3 of the files it loaded code from changed since ({library} among them): restart it"


def _asked(ours, loaded):
    """What warm_server._served makes of a request of identity `ours` from a server that loaded `loaded`: the
    request and the fd passed with it, or the line the launcher read."""
    with _connected() as (launcher, server, write):
        body = json.dumps({"identity": ours}).encode()
        send_fds(launcher, [warm_client.LENGTH.pack(len(body)) + body], [write])
        return warm_server._served(server, ours, loaded) or warm_client.read_line(launcher)


@contextlib.contextmanager
def _connected():
    """A launcher's and a server's ends of one connection, and a pipe's write end to pass over it; all closed
    after."""
    launcher, server = socket.socketpair()
    read, write = os.pipe()
    try:
        yield launcher, server, write
    finally:
        for end in (launcher, server):
            end.close()
        os.close(read)
        os.close(write)


def test_the_variables_compared_are_those_read_as_tensorflow_python_and_their_libraries_load():
    environ = {
        name: "1"
        for name in (
            *("TF_NUM_INTRAOP_THREADS", "TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL", "ONEDNN_MAX_CPU_ISA"),
            *("DNNL_VERBOSE", "OMP_NUM_THREADS", "KMP_AFFINITY", "LD_PRELOAD", "MALLOC_ARENA_MAX", "PYTHONPATH"),
            *("PARALLEL_TF_SET", "PYTHONUNBUFFERED", warm_client.SOCKET_VARIABLE, "HOME", "PATH"),
        )
    }
    assert sorted(warm_client.load_time_environment(environ)) == [
        "DNNL_VERBOSE",
        "KMP_AFFINITY",
        "LD_PRELOAD",
        "MALLOC_ARENA_MAX",
        "OMP_NUM_THREADS",
        "ONEDNN_MAX_CPU_ISA",
        "PARALLEL_TF_SET",
        "PYTHONPATH",
        "TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL",
        "TF_NUM_INTRAOP_THREADS",
    ]


def test_a_launcher_finding_no_server_says_so(tmp_path):
    path = tmp_path / "socket"
    assert warm_client.connect(str(path), {}, [], (None, None)) == (
        None,
        f"nothing listens on {path} (No such file or directory)",
    )


def test_the_socket_is_its_owners_alone(tmp_path):
    """Whoever connects has the server run a recipe of their choosing as its user: no one else may."""
    path = tmp_path / "socket"
    listener = warm_server.listen(str(path))
    try:
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
    finally:
        listener.close()


def test_a_launcher_that_stalls_mid_request_is_dropped_with_the_pipes_it_passed(monkeypatch):
    """One launcher that connects and stops part way holds up the server no longer than REQUEST_TIMEOUT_SECS."""
    monkeypatch.setattr(warm_server, "REQUEST_TIMEOUT_SECS", 0.2)
    with _connected() as (launcher, server, write):
        open_before = set(os.listdir("/proc/self/fd"))
        send_fds(launcher, [warm_client.LENGTH.pack(100) + b"{"], [write])  # 1 byte of 100
        assert warm_server._served(server, {}, {}) is None
        assert set(os.listdir("/proc/self/fd")) == open_before  # the passed pipe's copy closed


def test_a_server_that_does_not_answer_leaves_the_launch_to_load_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(warm_client, "START_TIMEOUT_SECS", 0.2)
    path = tmp_path / "socket"
    silent = warm_server.listen(str(path))  # listens, never accepts: a server still loading TensorFlow, or stuck
    read, write = os.pipe()
    try:
        assert warm_client.connect(str(path), {}, [write], (None, None)) == (None, "it did not answer within 0.2 s")
    finally:
        silent.close()
        os.close(read)
        os.close(write)


def test_a_warm_server_that_does_not_start_leaves_the_runs_to_load_tensorflow_themselves(monkeypatch, capsys):
    monkeypatch.setattr(warm_client, "START_TIMEOUT_SECS", 0)  # taken for dead before it could listen
    with runs.warm_server(True, "study") as path:
        assert path is None
    said = "[study] the warm fork server did not listen within 0 s: each run loads TensorFlow itself\n"
    assert capsys.readouterr().out == said


def test_a_child_that_cannot_take_the_launchers_place_says_why_and_exits(tmp_path):
    """Here its directory is gone: the launcher reads the reason (and loads its own TensorFlow, connect's refusal)."""
    launcher, server = socket.socketpair()
    read, write = os.pipe()
    gone = tmp_path / "gone"
    request = {"cwd": str(gone), "environ": {}, "fork_server": {"tasks": []}}
    pid = os.fork()
    if pid == 0:  # the server's child, as serve_forever forks it; never back into pytest
        try:
            launcher.close()
            warm_server._in_the_launchers_place(server, request, [write], {})
        finally:
            os._exit(0)  # not reached: it exits 1 itself
    server.close()
    os.close(read)
    os.close(write)
    try:
        said = warm_client.read_line(launcher)
    finally:
        launcher.close()
        _, status = os.waitpid(pid, 0)
    reason = f"[Errno 2] No such file or directory: {str(gone)!r}"
    assert said == f"refused its child could not take the launcher's place: {reason}"
    assert waitstatus_to_exitcode(status) == 1


@pytest.mark.parametrize("forking", ["fails", "is killed"])
def test_a_launch_server_that_fails_to_fork_its_tasks_exits_1_with_the_traceback_as_the_launchers_own_would(
    forking, monkeypatch
):
    """Its exit code reaches the launcher as it said it (an own fork server's would be its process's: 1 for an
    exception); one killed says nothing, and reads as -SIGKILL."""

    def fork_tasks(served, once_forked):
        if forking == "is killed":
            os.kill(os.getpid(), signal.SIGKILL)
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(warm_server.forkserver, "fork_tasks", fork_tasks)
    launcher, child_end = socket.socketpair()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            launcher.close()
            with open(write, "w", buffering=1) as sys.stderr:  # the launcher's, written through as the child's is
                warm_server._run_launch({}, child_end)
        finally:
            os._exit(3)
    child_end.close()
    os.close(write)
    launched = warm_client.LaunchServer(pid, launcher)
    try:
        code = launched.wait(RUN_TIMEOUT)
        with os.fdopen(read) as stderr:
            printed = stderr.read()
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    if forking == "fails":
        assert (code, printed.splitlines()[-1]) == (1, "BlockingIOError: [Errno 11] Resource temporarily unavailable")
    else:
        assert (code, printed) == (-signal.SIGKILL, "")


def test_a_launch_server_forks_its_tasks_before_it_starts_its_watch_on_the_launcher(monkeypatch):
    """A fork of a threaded process is what every runtime warns against (Python 3.12 does): at each task's fork the
    launch's child has one thread, and its watch on the launcher (a thread) starts once every task is forked."""
    threads_at_forks = []

    def fork():
        threads_at_forks.append(threading.active_count())
        return 2**22 + len(threads_at_forks)  # no such child: fork_tasks then waits for none

    launcher, child_end = socket.socketpair()
    said, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # the launch's child; never back into pytest
        try:
            monkeypatch.setattr(os, "fork", fork)  # os's own: forkserver's task forks, here only
            launcher.close()
            tasks = [{"name": f"worker:{i}", "output_fd": os.open(os.devnull, os.O_WRONLY)} for i in range(2)]
            served = {"report_fd": os.open(os.devnull, os.O_WRONLY), "tasks": tasks}
            real_watch = warm_server._watch_launcher
            warm_server._watch_launcher = lambda c: (threads_at_forks.append("watch"), real_watch(c))
            warm_server.say = lambda connection, line: os.write(told, f"{threads_at_forks} {line}".encode())
            warm_server._run_launch(served, child_end)
        finally:
            os._exit(3)
    child_end.close()
    os.close(told)
    try:
        with os.fdopen(said) as report:
            assert report.read() == "[1, 1, 'watch'] exited 0"
    finally:
        launcher.close()
        os.waitpid(pid, 0)


def test_a_launcher_refuses_a_server_of_another_user():
    """A socket another user listens on (one a world-writable folder let them put at the path): this launch's tasks
    would run as them, with its environment."""
    if os.getuid() != 0:
        pytest.skip("becoming another user takes root")
    folder, nobody = Path(tempfile.mkdtemp()), 65534  # under /tmp: another user reaches it
    folder.chmod(0o777)
    path = folder / "socket"
    pid = os.fork()
    if pid == 0:  # another user's server; never back into pytest
        try:
            os.setuid(nobody)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(1)
            path.chmod(0o777)  # the test's sign that it listens: a connect before listen() is refused
            listener.accept()
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while not path.exists() or path.stat().st_mode & 0o777 != 0o777:
            assert time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0), "the other user's server"
            time.sleep(0.01)
        assert warm_client.connect(str(path), {}, [], (None, None)) == (
            None,
            f"the server at {path} is another user's (uid {nobody})",
        )
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        shutil.rmtree(folder)
