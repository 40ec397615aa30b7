"""--download against a local HTTP server on 127.0.0.1 serving small generated files."""

import gzip
import hashlib
import http.server
import subprocess
import threading
import types

import pytest
from cifar_files import write_cifar10
from conftest import CIFAR_RECIPE, RECIPE, REPO, launcher_command, recipe_command
from idx_files import write_mnist

from parallel_tf.data import datasets, download
from parallel_tf.errors import TaskFailure
from parallel_tf.launch import recipe_checks as launch


class FileServer:
    """Serves {name: bytes} on a free 127.0.0.1 port and counts the requests."""

    def __init__(self, files):
        self.files, self.requests = files, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                server.requests.append(name)
                body = server.files.get(name)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/files/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def mnist_files(tmp_path):
    """The four MNIST files, gzipped as published, and their md5s."""
    source = tmp_path / "source"
    source.mkdir()
    write_mnist(source, num_train=50, num_eval=20, gz=True)
    files = {path.name: path.read_bytes() for path in source.iterdir()}
    return files, {name: hashlib.md5(body).hexdigest() for name, body in files.items()}


@pytest.fixture
def serve():
    servers = []
    yield lambda files: servers.append(FileServer(files)) or servers[-1]
    for server in servers:
        server.close()


def test_download_then_train_through_the_reader_and_reuse(tmp_path, mnist_files, serve, monkeypatch):
    files, md5s = mnist_files
    server = serve(files)
    monkeypatch.setitem(download.SOURCES, "mnist", ("http://unused.invalid/", md5s))
    data_dir = tmp_path / "data"
    settings = types.SimpleNamespace(data_dir=str(data_dir), download=True, download_url=server.url, seed=0)
    data = datasets.mnist(settings)
    assert data.train_x.shape == (50, 784) and data.eval_x.shape == (20, 784)
    assert sorted(server.requests) == sorted(files)
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(files)  # no temporary files left
    datasets.mnist(settings)
    assert len(server.requests) == len(files), "files with the right checksum are reused, not fetched again"


def test_checksum_mismatch_saves_nothing(tmp_path, mnist_files, serve, monkeypatch):
    files, md5s = mnist_files
    name = "train-labels-idx1-ubyte.gz"
    server = serve(dict(files, **{name: gzip.compress(b"tampered")}))
    monkeypatch.setitem(download.SOURCES, "mnist", ("http://unused.invalid/", md5s))
    with pytest.raises(TaskFailure, match=f"{name}: checksum mismatch .* not saved"):
        download.fetch("mnist", str(tmp_path), server.url)
    assert not (tmp_path / name).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(name)], "no partial file left behind"


def test_a_corrupt_local_file_is_fetched_again(tmp_path, mnist_files, serve, monkeypatch):
    files, md5s = mnist_files
    server = serve(files)
    monkeypatch.setitem(download.SOURCES, "mnist", ("http://unused.invalid/", md5s))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(b"half a fi")
    download.fetch("mnist", str(tmp_path), server.url)
    assert (tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes() == files["t10k-labels-idx1-ubyte.gz"]


def test_no_server_is_one_clear_failure(tmp_path, serve):
    closed = serve({})
    url = closed.url
    closed.close()
    with pytest.raises(TaskFailure, match=r"cannot download http://127\.0\.0\.1:\d+/files/cifar-10-python.tar.gz: .*"):
        download.fetch("cifar10", str(tmp_path), url)


@pytest.mark.cluster
def test_recipe_reports_a_published_checksum_mismatch_in_one_line(tmp_path, mnist_files, serve):
    """The real command line against the real published checksums: our tiny files cannot match."""
    files, _ = mnist_files
    server = serve(files)
    command = recipe_command(
        "--dataset=mnist", "--download", f"--download_url={server.url}", f"--data_dir={tmp_path / 'data'}"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert any("train-images-idx3-ubyte.gz: checksum mismatch" in line for line in lines), lines
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "data").glob("*ubyte*")), "nothing saved"


def test_the_launcher_downloads_before_it_fences_the_cluster(tmp_path, mnist_files, serve, monkeypatch):
    """Inside the launcher's private network the tasks reach only each other, so --download given
    to the launcher is done by the launcher first; the tasks then find every file in place."""
    files, md5s = mnist_files
    server = serve(files)
    monkeypatch.setitem(download.SOURCES, "mnist", ("http://unused.invalid/", md5s))
    data_dir = tmp_path / "data"
    given = ["--dataset=mnist", f"--data_dir={data_dir}", "--download", f"--download_url={server.url}"]
    launch.fetch_before_fencing(["--model=cnn", *given], RECIPE)  # among the recipe's other flags
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(files)
    launch.fetch_before_fencing(given, RECIPE)  # present with their checksums: nothing fetched again
    launch.fetch_before_fencing(given[:2], RECIPE)  # no --download: nothing fetched
    assert sorted(server.requests) == sorted(files)


def test_the_launcher_downloads_the_recipe_s_default_dataset_before_it_fences(tmp_path, serve, monkeypatch):
    """`--recipe=cifar10 --data_dir=... --download` names no --dataset: the recipe's default, CIFAR-10,
    is what its tasks would read (its --check_flags says so), so the launcher fetches that first; the
    workers inside the fence used to try, and fail."""
    write_cifar10(tmp_path, archive=True)
    archive = (tmp_path / "cifar-10-python.tar.gz").read_bytes()
    server = serve({"cifar-10-python.tar.gz": archive})
    monkeypatch.setitem(
        download.SOURCES,
        "cifar10",
        ("http://unused.invalid/", {"cifar-10-python.tar.gz": hashlib.md5(archive).hexdigest()}),
    )
    data_dir = tmp_path / "data"
    launch.fetch_before_fencing([f"--data_dir={data_dir}", "--download", f"--download_url={server.url}"], CIFAR_RECIPE)
    assert [p.name for p in data_dir.iterdir()] == ["cifar-10-python.tar.gz"]


@pytest.mark.cluster
def test_a_launcher_download_that_fails_stops_it_before_any_task_starts(tmp_path, mnist_files, serve):
    """The real command against the real published checksums, which our tiny files cannot match: the
    launcher reached the 127.0.0.1 server (from outside the fence it is about to enter), says why it
    failed in one line, exits 1 and starts nothing."""
    files, _ = mnist_files
    server = serve(files)
    data_dir = tmp_path / "data"
    command = launcher_command(
        "--dataset=mnist",
        "--download",
        f"--download_url={server.url}",
        f"--data_dir={data_dir}",
        f"--logdir={tmp_path / 'run'}",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[launch] error: http://127.0.0.1:" in done.stdout and "checksum mismatch" in done.stdout
    assert server.requests and "started" not in done.stdout
    assert not list(data_dir.glob("*ubyte*")), "nothing saved"
