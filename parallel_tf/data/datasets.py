"""Loaders for the datasets recipes train on, each taking Settings and returning a `data.Dataset`.

`digits` is scikit-learn's bundled 8x8 digits: real, offline. `mnist` reads the published idx
files (gzipped or not) and `cifar10` the published python pickles (a directory or the .tar.gz)
from --data_dir, fetching them first with --download. `synthetic_cifar10` is random images of
CIFAR-10's shape, for benchmarks and tests. Every file is checked; a bad one is a ConfigError
that names it.
"""

import gzip
import importlib.util
import io
import os
import pickle
import tarfile

import numpy as np

from parallel_tf.data import download
from parallel_tf.data.sharding import Dataset
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


CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR10_EVAL = ["test_batch"]
CIFAR10_SHAPE = (32, 32, 3)


def digits(settings):
    """scikit-learn's digits, pixels scaled to [0, 1], split into train/eval by the seed."""
    check_data_flags("digits", settings)
    table = _digits_table()
    x = (table[:, :-1] / 16.0).astype(np.float32)
    y = table[:, -1].astype(np.int64)
    order = np.random.RandomState(settings.seed).permutation(len(x))
    num_eval = int(len(x) * DIGITS_EVAL_FRACTION)
    eval_idx, train_idx = order[:num_eval], order[num_eval:]
    return Dataset(x[train_idx], y[train_idx], x[eval_idx], y[eval_idx], num_classes=10, name="digits")


def _digits_table():
    """The file sklearn.datasets.load_digits reads (64 pixels and the label a row), read as it reads
    it but without importing scikit-learn, which costs every task process 1.4 s of start-up here."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    if spec is None:
        raise ConfigError("--dataset=digits needs scikit-learn, whose bundled copy it reads: pip install scikit-learn")
    package = spec.submodule_search_locations  # a package's directories: scikit-learn's one
    assert package, spec
    path = os.path.join(package[0], "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",")


def mnist(settings):
    """MNIST from its idx files in --data_dir; images flattened to 784 floats in [0, 1]."""
    return mnist_idx(_data_dir("mnist", settings))


def mnist_idx(data_dir):
    arrays = _mnist_arrays(data_dir)
    return Dataset(
        _flat_pixels(arrays["train_x"]),
        arrays["train_y"].astype(np.int64),
        _flat_pixels(arrays["eval_x"]),
        arrays["eval_y"].astype(np.int64),
        num_classes=10,
        name="mnist",
    )


def _mnist_arrays(data_dir):
    """{train_x, train_y, eval_x, eval_y} as the idx files hold them (bytes), each file checked."""
    arrays = {
        key: _read_idx(_find(data_dir, name), _IDX_IMAGES_MAGIC if key.endswith("_x") else _IDX_LABELS_MAGIC)
        for key, name in MNIST_FILES.items()
    }
    for split in ("train", "eval"):
        images, labels = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if len(images) != len(labels):
            raise ConfigError(
                f"{data_dir}: {MNIST_FILES[split + '_x']} has {len(images)} images but "
                f"{MNIST_FILES[split + '_y']} has {len(labels)} labels"
            )
        if labels.max(initial=0) > 9:
            raise ConfigError(f"{data_dir}: {MNIST_FILES[split + '_y']} has label {labels.max()}; MNIST's are 0 to 9")
    return arrays


def _flat_pixels(images):
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


def _find(data_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.isfile(path):
            return path
    if not os.path.isdir(data_dir):
        raise ConfigError(f"--data_dir={data_dir}: no such directory")
    raise ConfigError(f"--data_dir={data_dir}: missing MNIST file {name} (or {name}.gz)")


def _read_idx(path, expected_magic):
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
    if magic != expected_magic:
        raise ConfigError(
            f"{path}: magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"(an idx file of unsigned bytes with {expected_magic & 0xFF} dimensions)"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"{path}: truncated header")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise ConfigError(f"{path}: size {len(raw)} bytes does not match its header {dims} ({expected} bytes)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def cifar10(settings):
    """CIFAR-10 from --data_dir: cifar-10-batches-py/ or cifar-10-python.tar.gz; NHWC in [0, 1]."""
    batches = _cifar_arrays(_data_dir("cifar10", settings))
    train = [_cifar_images(*batches[name]) for name in CIFAR10_TRAIN]
    eval_x, eval_y = _cifar_images(*batches[CIFAR10_EVAL[0]])
    train_x = np.concatenate([x for x, _ in train])
    train_y = np.concatenate([y for _, y in train])
    return Dataset(train_x, train_y, eval_x, eval_y, num_classes=10, name="cifar10")


def _cifar_arrays(data_dir):
    """{batch name: (data, labels)} as the files hold them (bytes, ints), each batch checked."""
    batches = _read_cifar_batches(data_dir, CIFAR10_TRAIN + CIFAR10_EVAL)
    return {name: _cifar_batch(*batches[name]) for name in CIFAR10_TRAIN + CIFAR10_EVAL}


def synthetic_cifar10(settings, num_train=1000, num_eval=200):
    """Random images of CIFAR-10's shape and random labels, fixed by the seed."""
    check_data_flags("synthetic", settings)
    rng = np.random.RandomState(settings.seed)
    images = rng.rand(num_train + num_eval, *CIFAR10_SHAPE).astype(np.float32)
    labels = rng.randint(0, 10, size=num_train + num_eval).astype(np.int64)
    return Dataset(
        images[:num_train], labels[:num_train], images[num_train:], labels[num_train:], num_classes=10, name="synthetic"
    )


def check_data_flags(dataset, settings):
    """The data flags' rules, before anything is read: a dataset of published files (those --download
    knows) needs --data_dir; one that needs no files takes neither --data_dir nor --download."""
    if dataset in download.SOURCES:
        if not settings.data_dir:
            raise ConfigError(f"--dataset={dataset} is read from files: give --data_dir (and --download to fetch them)")
        return
    for flag in ("data_dir", "download"):
        if getattr(settings, flag):
            raise ConfigError(f"--{flag} does not apply to --dataset={dataset}, which needs no files")


def known_shape(loader):
    """(feature shape, classes) of one of this module's loaders, without reading anything (a task's
    --check_flags builds the model from it); None for a recipe's own loader."""
    cifar = (CIFAR10_SHAPE, 10)
    return {digits: ((64,), 10), mnist: ((784,), 10), cifar10: cifar, synthetic_cifar10: cifar}.get(loader)


def check_loader_flags(loader, settings):
    """What one of this module's loaders would refuse, before anything starts (a task's --check_flags, which the
    launcher runs): its flags, and the files it would read, each checked as it reads them, without keeping them.
    With --download the files are not checked here: the fetch checks each against its published checksum. A
    recipe's own loader checks its flags and files itself, when it loads."""
    dataset = {digits: "digits", mnist: "mnist", cifar10: "cifar10", synthetic_cifar10: "synthetic"}.get(loader)
    if not dataset:
        return
    check_data_flags(dataset, settings)
    if dataset in FILES_CHECK and not settings.download:
        FILES_CHECK[dataset](settings.data_dir)


FILES_CHECK = {"mnist": _mnist_arrays, "cifar10": _cifar_arrays}


def _data_dir(dataset, settings):
    check_data_flags(dataset, settings)
    if settings.download:
        download.fetch(dataset, settings.data_dir, settings.download_url)
    return settings.data_dir


def _read_cifar_batches(data_dir, names):
    """{name: (where, bytes)} from cifar-10-batches-py/ or, failing that, the .tar.gz (read once)."""
    directory, archive = os.path.join(data_dir, CIFAR10_DIR), os.path.join(data_dir, CIFAR10_ARCHIVE)
    if os.path.isdir(directory):
        return {name: _read_file(os.path.join(directory, name)) for name in names}
    if os.path.isfile(archive):
        return _read_archive_members(archive, {f"{CIFAR10_DIR}/{name}": name for name in names})
    raise ConfigError(f"--data_dir={data_dir}: neither {CIFAR10_DIR}/ nor {CIFAR10_ARCHIVE} is there")


def _read_file(path):
    try:
        with open(path, "rb") as f:
            return path, f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None


def _read_archive_members(archive, members):
    """Reads `members` ({member path: name}) from a .tar.gz in one pass: {name: (where, bytes)}."""
    found = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for info in tar:
                if info.name in members and info.isfile():
                    member = tar.extractfile(info)
                    assert member, info.name  # a regular file's
                    found[members[info.name]] = (f"{archive}:{info.name}", member.read())
    except (OSError, EOFError, tarfile.TarError) as e:
        raise ConfigError(f"{archive}: corrupt or truncated archive: {e}") from None
    missing = [member for member, name in members.items() if name not in found]
    if missing:
        raise ConfigError(f"{archive}: {missing[0]} is missing from the archive")
    return found


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only: a pickle can otherwise run any code it names."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store raw bytes
    }

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _cifar_batch(where, raw):
    """Checks one CIFAR-10 batch (a pickled dict of b"data" N x 3072 bytes and b"labels"): (data, labels)."""
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # a corrupt pickle can fail in many ways; all mean the same to the user
        raise ConfigError(f"{where}: not a CIFAR-10 batch ({type(e).__name__}: {e})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ConfigError(f"{where}: not a CIFAR-10 batch (expected a dict with data and labels)")
    data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ConfigError(f"{where}: data must be N x 3072 bytes, got {data.dtype} {data.shape}")
    if labels.shape != (len(data),) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise ConfigError(f"{where}: expected {len(data)} labels from 0 to 9, got shape {labels.shape}")
    return data, labels


def _cifar_images(data, labels):
    """A checked batch as NHWC images in [0, 1] and int64 labels."""
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return images, labels.astype(np.int64)
