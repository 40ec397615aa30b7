"""Loaders for the datasets recipes train on, each returning a `data.Dataset`.

`digits` is scikit-learn's bundled 8x8 digits: real, offline, the default. `mnist_idx` reads
the published MNIST idx files (gzipped or not) from a directory.
"""

import gzip
import os

import numpy as np

from parallel_tf.data import Dataset
from parallel_tf.errors import ConfigError

DIGITS_EVAL_FRACTION = 0.2

MNIST_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "eval_x": "t10k-images-idx3-ubyte",
    "eval_y": "t10k-labels-idx1-ubyte",
}
_IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
_IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension


def digits(seed):
    """scikit-learn's digits, pixels scaled to [0, 1], split into train/eval by `seed`."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(x))
    num_eval = int(len(x) * DIGITS_EVAL_FRACTION)
    eval_idx, train_idx = order[:num_eval], order[num_eval:]
    return Dataset(x[train_idx], y[train_idx], x[eval_idx], y[eval_idx], num_classes=10, name="digits")


def mnist_idx(data_dir):
    """MNIST from its idx files in `data_dir`; images flattened to 784 floats in [0, 1]."""
    arrays = {key: _read_idx(_find(data_dir, name)) for key, name in MNIST_FILES.items()}
    for split in ("train", "eval"):
        images, labels = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if len(images) != len(labels):
            raise ConfigError(
                f"{data_dir}: {MNIST_FILES[split + '_x']} has {len(images)} images but "
                f"{MNIST_FILES[split + '_y']} has {len(labels)} labels"
            )
    flatten = lambda images: images.reshape(len(images), -1).astype(np.float32) / 255.0  # noqa: E731
    return Dataset(
        flatten(arrays["train_x"]),
        arrays["train_y"].astype(np.int64),
        flatten(arrays["eval_x"]),
        arrays["eval_y"].astype(np.int64),
        num_classes=10,
        name="mnist",
    )


def _find(data_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.isfile(path):
            return path
    if not os.path.isdir(data_dir):
        raise ConfigError(f"--data_dir={data_dir}: no such directory")
    raise ConfigError(f"--data_dir={data_dir}: missing MNIST file {name} (or {name}.gz)")


def _read_idx(path):
    """Reads one idx file, checking its magic number and that its size matches its header."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    if len(raw) < 4:
        raise ConfigError(f"{path}: truncated: {len(raw)} bytes, too short for an idx header")
    magic = int.from_bytes(raw[:4], "big")
    if magic not in (_IDX_IMAGES_MAGIC, _IDX_LABELS_MAGIC):
        raise ConfigError(f"{path}: not an idx file of unsigned bytes (magic number 0x{magic:08x})")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"{path}: truncated header")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise ConfigError(f"{path}: size {len(raw)} bytes does not match its header {dims} ({expected} bytes)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
