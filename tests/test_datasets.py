import types

import numpy as np
import pytest
from idx_files import idx_bytes, write_mnist

from parallel_tf.data import datasets
from parallel_tf.errors import ConfigError


@pytest.mark.parametrize("gz", [False, True])
def test_reads_mnist_idx_files(tmp_path, gz):
    write_mnist(tmp_path, num_train=30, num_eval=10, gz=gz)
    data = datasets.mnist_idx(str(tmp_path))
    assert data.train_x.shape == (30, 784) and data.eval_x.shape == (10, 784)
    assert data.train_x.dtype == np.float32 and data.train_x.min() >= 0.0 and data.train_x.max() == 1.0
    assert data.train_y.shape == (30,) and set(data.train_y) <= set(range(10))


def test_missing_directory_and_missing_file_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no such directory"):
        datasets.mnist_idx(str(tmp_path / "absent"))
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ConfigError, match="missing MNIST file t10k-labels-idx1-ubyte"):
        datasets.mnist_idx(str(tmp_path))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: raw[:-5], "does not match its header"),
        (lambda raw: raw + b"\0", "does not match its header"),
        (lambda raw: b"\0\0\x08\x0d" + raw[4:], "magic number 0x0000080d, expected 0x00000803"),
        (lambda raw: b"\0\0\x08\x01" + raw[4:], "magic number 0x00000801, expected 0x00000803"),
        (lambda raw: raw[:2], "truncated"),
    ],
)
def test_corrupt_files_are_named(tmp_path, damage, message):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ConfigError, match=f"train-images-idx3-ubyte: .*{message}"):
        datasets.mnist_idx(str(tmp_path))


def test_corrupt_gzip_is_named(tmp_path):
    write_mnist(tmp_path, gz=True)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ConfigError, match="t10k-images-idx3-ubyte.gz: cannot read"):
        datasets.mnist_idx(str(tmp_path))


def test_image_and_label_counts_must_agree(tmp_path):
    write_mnist(tmp_path, num_train=30)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(29)))
    with pytest.raises(ConfigError, match="has 30 images but train-labels-idx1-ubyte has 29 labels"):
        datasets.mnist_idx(str(tmp_path))


def test_digits_split_is_fixed_by_the_seed():
    def digits(seed):
        return datasets.digits(types.SimpleNamespace(seed=seed, data_dir=None, download=False))

    a, b, c = digits(0), digits(0), digits(1)
    assert len(a.train_x) + len(a.eval_x) == 1797 and len(a.eval_x) == 359
    np.testing.assert_array_equal(a.eval_y, b.eval_y)
    assert not np.array_equal(a.eval_x, c.eval_x)


def test_digits_are_scikit_learns_without_importing_it():
    """Read from scikit-learn's bundled file directly (its import costs each task 1.4 s): the same
    pixels and labels as load_digits, in its order."""
    from sklearn.datasets import load_digits

    table = datasets._digits_table()
    bunch = load_digits()
    np.testing.assert_array_equal(table[:, :-1], bunch.data)
    np.testing.assert_array_equal(table[:, -1], bunch.target)


def test_digits_without_scikit_learn_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(datasets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="--dataset=digits needs scikit-learn"):
        datasets.digits(types.SimpleNamespace(seed=0, data_dir=None, download=False))


def test_labels_out_of_range_are_named(tmp_path):
    write_mnist(tmp_path, num_train=30)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.full(30, 10)))
    with pytest.raises(ConfigError, match="train-labels-idx1-ubyte has label 10; MNIST's are 0 to 9"):
        datasets.mnist_idx(str(tmp_path))
