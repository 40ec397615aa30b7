"""Writes tiny datasets in the real CIFAR-10 python format (pickled dicts, a dir or a .tar.gz)."""

import io
import pickle
import tarfile

import numpy as np

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def batch_bytes(count, seed):
    """One batch as the published files hold it: bytes keys, N x 3072 uint8 data, list labels.
    Each class has its own colour, so a model can learn them."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=count)
    data = rng.randint(0, 40, size=(count, 3, 32, 32)).astype(np.uint8)
    for i, label in enumerate(labels):
        data[i, label % 3] += np.uint8(20 * label)
    batch = {
        b"batch_label": b"testing batch",
        b"labels": labels.tolist(),
        b"data": data.reshape(count, 3072),
        b"filenames": [b"image_%d.png" % i for i in range(count)],
    }
    return pickle.dumps(batch, protocol=2)


def write_cifar10(directory, per_batch=24, archive=False):
    contents = {name: batch_bytes(per_batch, seed) for seed, name in enumerate(BATCHES)}
    if archive:
        with tarfile.open(directory / "cifar-10-python.tar.gz", "w:gz") as tar:
            for name, raw in contents.items():
                info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
                info.size = len(raw)
                tar.addfile(info, io.BytesIO(raw))
    else:
        (directory / "cifar-10-batches-py").mkdir()
        for name, raw in contents.items():
            (directory / "cifar-10-batches-py" / name).write_bytes(raw)
