"""Fetches a dataset's published archives into --data_dir, checked against published checksums.

Each file is written to a temporary name in the same directory and renamed into place only after
its checksum matches, so an interrupted or concurrent download (every worker of a cluster may
run one) never leaves a partial file under the real name. A file already there with the right
checksum is reused.
"""

import hashlib
import os
import tempfile
import urllib.error
import urllib.request

from absl import logging

from parallel_tf.errors import ConfigError, TaskFailure

# name -> (default base URL, {file: md5 as published with the dataset or by its standard mirror})
SOURCES = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        {
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    ),
    "cifar10": (
        "https://www.cs.toronto.edu/~kriz/",
        {"cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a"},
    ),
}
TIMEOUT_SECS = 60
CHUNK_BYTES = 1 << 20


def fetch(dataset, data_dir, base_url=None, sources=SOURCES, say=logging.info):
    """Makes sure every file of `dataset` is in `data_dir` with its published checksum, saying what it does
    with `say` (the launcher's own lines; a task's log). A failure leaves no directory it made empty."""
    default_url, files = sources[dataset]
    base_url = base_url or default_url
    made = _first_missing(data_dir)
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--data_dir={data_dir}: cannot create: {e.strerror}") from None
    try:
        for name, md5 in files.items():
            path = os.path.join(data_dir, name)
            if os.path.isfile(path) and _md5(path) == md5:
                say(f"{path}: already downloaded, checksum ok")
                continue
            url = base_url.rstrip("/") + "/" + name
            say(f"downloading {url}")
            _download_verified(url, path, md5)
    except TaskFailure:
        _remove_empty(data_dir, made)
        raise


def _first_missing(path):
    """The outermost directory of `path` that does not exist yet, or None."""
    missing = None
    while path and not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _remove_empty(path, up_to):
    """Removes `path` and its parents while empty, as far as `up_to` (the first one this run made)."""
    if up_to is None:
        return
    while os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)
        if os.path.normpath(path) == os.path.normpath(up_to):
            return
        path = os.path.dirname(path)


def _download_verified(url, path, md5):
    handle, partial = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=os.path.basename(path) + ".")
    try:
        digest = hashlib.md5()
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_SECS) as response:
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != md5:
            raise TaskFailure(f"{url}: checksum mismatch (md5 {digest.hexdigest()}, published {md5}); not saved")
        os.replace(partial, path)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise TaskFailure(
            f"cannot download {url}: {reason}; without network, put the files in --data_dir yourself"
        ) from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _md5(path):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()
