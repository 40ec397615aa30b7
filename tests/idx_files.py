"""Writes tiny datasets in the real MNIST idx format, for tests of the readers."""

import gzip

import numpy as np

IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801


def idx_bytes(array):
    magic = IMAGES_MAGIC if array.ndim == 3 else LABELS_MAGIC
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_mnist(directory, num_train=60, num_eval=20, gz=False, seed=0):
    """Images whose class is readable from a bright band, so a model can learn them."""
    rng = np.random.RandomState(seed)
    for prefix, count in (("train", num_train), ("t10k", num_eval)):
        labels = rng.randint(0, 10, size=count)
        images = rng.randint(0, 60, size=(count, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 * label : 2 * label + 2, :] = 255
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = directory / f"{prefix}-{kind}-ubyte"
            data = idx_bytes(array)
            if gz:
                with gzip.open(f"{path}.gz", "wb") as f:
                    f.write(data)
            else:
                path.write_bytes(data)
