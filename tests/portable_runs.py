"""The runs whose bits tests/test_portable_bits.py holds on every machine, and a script that trains a set of
them in a process of its own: under QEMU's CPU models, or under an ONEDNN_MAX_CPU_ISA cap (read once, as
TensorFlow loads). It prints {name: params_sha256} as JSON on its last line.

    python tests/portable_runs.py emulated          # the short runs a CPU model under QEMU trains
    python tests/portable_runs.py default emulated  # and the README's default run: sync, 2 workers, 1000 steps
"""

import hashlib
import itertools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from inprocess import train
from models import CNN, DIGITS, FLAGS, MLP

from parallel_tf.compat import tf
from parallel_tf.graph.products import contract

# name: (recipe, mode, flags); the digits MLP and the mnist recipe's CNN, the tests' FLAGS unless said
EMULATED = {  # a few steps at the shapes of one and two workers' shards: the products a cluster computes
    "MLP, 120-row batches": (MLP, "single", {"train_steps": 10}),
    "MLP, 60-row batches": (MLP, "single", {"train_steps": 10, "global_batch_size": 60}),
    "CNN, 60-row batches": (CNN, "single", {"train_steps": 3, "global_batch_size": 60}),
}
CLUSTERS = {
    "one process": (MLP, "single", {}),
    "sync, 2 workers": (MLP, "sync", {"num_workers": 2}),
    **{f"strict sync, {n} workers": (MLP, "sync", {"num_workers": n, "strict_determinism": True}) for n in (1, 2, 4)},
    "allreduce, 2 workers": (MLP, "allreduce", {"num_workers": 2}),
    "CNN, one process": (CNN, "single", {"train_steps": 10}),
}
DEFAULT = {  # what ./run_local_cluster.sh trains: the recipe's flag defaults
    "default run": (MLP, "sync", {"num_workers": 2, "train_steps": 1000, "log_every": 50}),
}
SETS = {"emulated": EMULATED, "clusters": CLUSTERS, "default": DEFAULT}
# m, k, n of products: rows around every register block's edge (8, 16, 24, 48), sums around PIECE (288)
ROWS, DEPTHS, COLUMNS = (1, 7, 16, 17, 24, 25, 47, 60, 97, 120), (1, 9, 64, 144, 287, 288, 289, 600), (1, 5, 33, 128)
PRODUCTS = f"products of {len(ROWS) * len(DEPTHS) * len(COLUMNS)} shapes"


def hash_of_products():
    """The SHA-256 of products.contract's a @ b and cᵀ b, with k known when the graph is built and known only
    at run time (as a batch's rows are), for every m, k, n of ROWS, DEPTHS and COLUMNS, on seeded random
    matrices: the arithmetic of every layer's forward and backward products."""
    digest = hashlib.sha256()
    with tf.Graph().as_default(), tf.Session() as sess:
        random = np.random.RandomState(0)
        for k in DEPTHS:
            a, b, c = (tf.placeholder(tf.float32, shape) for shape in ([None, k], [k, None], [k, None]))
            rows = tf.placeholder(tf.float32, [None, None])
            products = [contract(a, b), contract(c, b, transpose_a=True), contract(rows, b, transpose_a=True)]
            for m, n in itertools.product(ROWS, COLUMNS):
                values = [random.randn(*shape).astype(np.float32) for shape in ((m, k), (k, n), (k, m))]
                for product in sess.run(products, {a: values[0], b: values[1], c: values[2], rows: values[2]}):
                    digest.update(product.tobytes())
    return digest.hexdigest()


def train_all(runs, logdir):
    """{name: summary.json} of each run, trained under `logdir`."""
    summaries = {}
    for name, (recipe, mode, flags) in runs.items():
        run_dir = Path(logdir) / name.replace(" ", "_").replace(",", "")
        summaries[name] = train(recipe, DIGITS, run_dir, mode, **{**FLAGS, **flags})["summary"]
    return summaries


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as logdir:
        trained = train_all({name: run for set_name in sys.argv[1:] for name, run in SETS[set_name].items()}, logdir)
    hashes = {name: summary["params_sha256"] for name, summary in trained.items()}
    print(json.dumps({**hashes, **({PRODUCTS: hash_of_products()} if "emulated" in sys.argv else {})}))
