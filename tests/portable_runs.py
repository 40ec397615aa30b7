"""The runs whose bits tests/test_portable_bits.py holds on every machine, and a script that trains a set of
them in a process of its own: under QEMU's CPU models, or under an ONEDNN_MAX_CPU_ISA cap (read once, as
TensorFlow loads). It prints {name: params_sha256} as JSON on its last line.

    python tests/portable_runs.py emulated          # the short runs a CPU model under QEMU trains, and the probes
    python tests/portable_runs.py default emulated  # and the README's default run: sync, 2 workers, 1000 steps
    python tests/portable_runs.py kernel            # the kernel this CPU runs, and its products at WIDE_COLUMNS
"""

import hashlib
import itertools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from inprocess import train
from models import CIFAR10, CNN, DEFAULTS, DIGITS, FLAGS, MLP

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.data import datasets
from parallel_tf.graph import portable_kernel
from parallel_tf.graph.products import contract, conv2d_same
from parallel_tf.training.recipe import Recipe

CIFAR10_RECIPE = Recipe(name="cifar10", model_fn=CIFAR10.model, datasets={})
SYNTHETIC_CIFAR10 = datasets.synthetic_cifar10(DEFAULTS, num_train=240, num_eval=24)
# name: (recipe, mode, flags); the digits MLP and the mnist recipe's CNN, the tests' FLAGS unless said
EMULATED = {  # a few steps at the shapes of one and two workers' shards: the products a cluster computes
    "MLP, 120-row batches": (MLP, "single", {"train_steps": 10}),
    "MLP, 60-row batches": (MLP, "single", {"train_steps": 10, "global_batch_size": 60}),
    "CNN, 60-row batches": (CNN, "single", {"train_steps": 3, "global_batch_size": 60}),
    # every optimizer's update (sgd's is the first run's): Adagrad's square root and division, Adam's
    **{
        f"MLP, {name}": (MLP, "single", {"train_steps": 10, "optimizer": name})
        for name in ("momentum", "adagrad", "adam")
    },
}
CLUSTERS = {
    "one process": (MLP, "single", {}),
    "sync, 2 workers": (MLP, "sync", {"num_workers": 2}),
    **{f"strict sync, {n} workers": (MLP, "sync", {"num_workers": n, "strict_determinism": True}) for n in (1, 2, 4)},
    "allreduce, 2 workers": (MLP, "allreduce", {"num_workers": 2}),
    "CNN, one process": (CNN, "single", {"train_steps": 10}),
    "PowerSGD, allreduce, 2 workers": (MLP, "allreduce", {"num_workers": 2, "powersgd_rank": 2}),
    "clipped at 0.05, sync, 2 workers": (MLP, "sync", {"num_workers": 2, "clip_norm": 0.05}),
    # at 1 the clipping's quotient has a numerator of 1 (graph/exact_ops.py's quotient, not a Reciprocal)
    "clipped at 1, sync, 2 workers": (MLP, "sync", {"num_workers": 2, "clip_norm": 1.0}),
    "cifar10 CNN, synthetic, one process": (CIFAR10_RECIPE, "single", {"train_steps": 5, "global_batch_size": 24}),
}
DEFAULT = {  # what ./run_local_cluster.sh trains: the recipe's flag defaults
    "default run": (MLP, "sync", {"num_workers": 2, "train_steps": 1000, "log_every": 50}),
}
SETS = {"emulated": EMULATED, "clusters": CLUSTERS, "default": DEFAULT}
# m, k, n of products: rows and columns around the kernel's 6 x 16 blocks, sums around its 256-term blocks
ROWS, DEPTHS, COLUMNS = (1, 5, 6, 7, 13, 96, 97, 120), (1, 9, 64, 255, 256, 257, 600), (1, 15, 16, 17, 33, 128)
# the AVX-512 kernel's 6 x 32 blocks: columns around one and two panels of 16 and the 1024-column block, the
# rows and sums as above
WIDE_COLUMNS = (31, 32, 33, 47, 48, 63, 64, 65, 1023, 1040)
# images (batch, height, width, channels) and kernels (size, filters) of convolutions, odd and even, square or not
CONVOLUTIONS = (((2, 8, 8, 3), (3, 16)), ((3, 7, 5, 5), (2, 7)), ((1, 16, 16, 32), (5, 4)))
PRODUCTS = f"products of {len(ROWS) * len(DEPTHS) * len(COLUMNS)} shapes and {len(CONVOLUTIONS)} convolutions"
# The approximate instructions the portable allow-list (graph/exact_ops.py) leaves out, each as TensorFlow's op
# that runs it on a vector: a probe whose bits QEMU, computing exactly, gives otherwise than a real CPU, so the
# emulated runs can show a hole of that kind.
PROBES = {"Rsqrt (RSQRTPS)": "rsqrt", "Reciprocal (RCPPS)": "reciprocal"}


def hash_of_probes():
    """{probe: SHA-256 of its op on 4096 values from 0.5 to 2048}, in TensorFlow's own ops, as no portable run has."""
    values = np.linspace(0.5, 2048, 4096, dtype=np.float32)
    with tf.Graph().as_default(), tf.Session() as sess:
        x = tf.placeholder(tf.float32, [None])
        return {
            probe: hashlib.sha256(sess.run(getattr(tf.math, op)(x), {x: values}).tobytes()).hexdigest()
            for probe, op in PROBES.items()
        }


def hash_of_products(columns=COLUMNS):
    """The SHA-256 of products.contract's a @ b, aᵀ b and a bᵀ for every m, k, n of ROWS, DEPTHS and `columns`, and
    of each convolution of CONVOLUTIONS with the gradients of its inputs and kernel, on seeded random values: the
    arithmetic of every layer's forward and backward products."""
    digest = hashlib.sha256()
    random = np.random.RandomState(0)
    with tf.Graph().as_default(), tf.Session() as sess:
        a, b = tf.placeholder(tf.float32, [None, None]), tf.placeholder(tf.float32, [None, None])
        products = [contract(a, b), contract(a, b, transpose_a=True), contract(a, b, transpose_b=True)]
        for m, k, n in itertools.product(ROWS, DEPTHS, columns):
            for product, (left, right) in zip_strict(products, (((m, k), (k, n)), ((k, m), (k, n)), ((m, k), (n, k)))):
                feed = {a: random.randn(*left).astype(np.float32), b: random.randn(*right).astype(np.float32)}
                digest.update(sess.run(product, feed).tobytes())
        for image, (size, filters) in CONVOLUTIONS:
            x = tf.constant(random.randn(*image).astype(np.float32))
            kernel = tf.constant(random.randn(size, size, image[3], filters).astype(np.float32))
            y = conv2d_same(x, kernel)
            upstream = tf.constant(random.randn(*image[:3], filters).astype(np.float32))
            for value in sess.run([y, *tf.gradients(y, [x, kernel], grad_ys=upstream)]):
                digest.update(value.tobytes())
    return digest.hexdigest()


def train_all(runs, logdir):
    """{name: summary.json} of each run, trained under `logdir`."""
    summaries = {}
    for name, (recipe, mode, flags) in runs.items():
        run_dir = Path(logdir) / name.replace(" ", "_").replace(",", "")
        data = SYNTHETIC_CIFAR10 if recipe is CIFAR10_RECIPE else DIGITS
        summaries[name] = train(recipe, data, run_dir, mode, **{**FLAGS, **flags})["summary"]
    return summaries


if __name__ == "__main__":
    if sys.argv[1:] == ["kernel"]:
        print(json.dumps({"kernel": portable_kernel.instruction_set(), "products": hash_of_products(WIDE_COLUMNS)}))
        sys.exit(0)
    with tempfile.TemporaryDirectory() as logdir:
        trained = train_all({name: run for set_name in sys.argv[1:] for name, run in SETS[set_name].items()}, logdir)
    hashes = {name: summary["params_sha256"] for name, summary in trained.items()}
    emulated = {PRODUCTS: hash_of_products(), **hash_of_probes()} if "emulated" in sys.argv else {}
    print(json.dumps({**hashes, **emulated}))
