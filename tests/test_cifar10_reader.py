import io
import pickle
import tarfile
import types

import numpy as np
import pytest
from cifar_files import batch_bytes, write_cifar10

from parallel_tf.data import datasets
from parallel_tf.errors import ConfigError


def settings(data_dir):
    return types.SimpleNamespace(data_dir=str(data_dir), download=False, download_url=None, seed=0)


@pytest.mark.parametrize("archive", [False, True])
def test_reads_batches_from_a_directory_or_the_archive(tmp_path, archive):
    write_cifar10(tmp_path, per_batch=24, archive=archive)
    data = datasets.cifar10(settings(tmp_path))
    assert data.train_x.shape == (5 * 24, 32, 32, 3) and data.eval_x.shape == (24, 32, 32, 3)
    assert data.train_x.dtype == np.float32 and data.train_x.min() >= 0.0 and data.train_x.max() <= 1.0
    # channel-last conversion: pixel (row 0, col 1) of channel c is byte c * 1024 + 1 of a row
    raw = pickle.loads(batch_bytes(24, seed=0), encoding="bytes")[b"data"]
    np.testing.assert_allclose(data.train_x[0, 0, 1], raw[0, [1, 1025, 2049]] / 255.0, rtol=1e-6)


def test_directory_and_archive_give_the_same_arrays(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_cifar10(tmp_path / "a")
    write_cifar10(tmp_path / "b", archive=True)
    a, b = datasets.cifar10(settings(tmp_path / "a")), datasets.cifar10(settings(tmp_path / "b"))
    np.testing.assert_array_equal(a.train_x, b.train_x)
    np.testing.assert_array_equal(a.eval_y, b.eval_y)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a CIFAR-10 batch \\(EOFError"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}), "expected a dict with data and labels"),
        (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), "data must be N x 3072 bytes"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "expected 2 labels from 0 to 9"),
        (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [12]}), "expected 1 labels from 0 to 9"),
    ],
)
def test_bad_batches_are_named(tmp_path, content, message):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(content)
    with pytest.raises(ConfigError, match=f"test_batch: .*{message}"):
        datasets.cifar10(settings(tmp_path))


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (print, ("pwned",))

    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(ConfigError, match="data_batch_2: not a CIFAR-10 batch .*refusing to load builtins.print"):
        datasets.cifar10(settings(tmp_path))


def test_truncated_archive_and_missing_member_are_named(tmp_path):
    write_cifar10(tmp_path, archive=True)
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(ConfigError, match="cifar-10-python.tar.gz: corrupt or truncated archive"):
        datasets.cifar10(settings(tmp_path))
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(ConfigError, match="cifar-10-batches-py/data_batch_2 is missing from the archive"):
        datasets.cifar10(settings(tmp_path))


def test_nothing_there_says_what_is_expected(tmp_path):
    with pytest.raises(ConfigError, match="neither cifar-10-batches-py/ nor cifar-10-python.tar.gz is there"):
        datasets.cifar10(settings(tmp_path))
