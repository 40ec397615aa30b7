"""Datasets as arrays, and the deterministic sharder that makes sync training worker-count free.

Global batch t is the same B examples whatever the worker count: the training set is shuffled
once per epoch by a permutation seeded from (seed, epoch), batches are consecutive windows of
the endless stream of those permutations, and worker i takes contiguous slice i of each batch.
Everything is a pure function of (seed, step), so a resumed run sees the same data.
"""

import dataclasses
import functools

import numpy as np

from parallel_tf.backports import zip_strict
from parallel_tf.cluster.config import check_shardable
from parallel_tf.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Dataset:
    train_x: np.ndarray
    train_y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray
    num_classes: int
    name: str

    @property
    def feature_shape(self):
        return self.train_x.shape[1:]


class GlobalBatchSharder:
    """Maps (step, worker) to the indices of that worker's slice of global batch `step`."""

    def __init__(self, num_examples, global_batch_size, num_shards, seed):
        check_shardable(global_batch_size, num_shards)
        if num_examples < 1:
            raise ConfigError("the training set is empty")
        self.num_examples = num_examples
        self.global_batch_size = global_batch_size
        self.shard_size = global_batch_size // num_shards
        self.seed = seed
        self._epoch_order = functools.lru_cache(maxsize=4)(self._permutation)

    def _permutation(self, epoch):
        # RandomState is numpy's frozen legacy generator: the same permutation on every version.
        return np.random.RandomState([self.seed, epoch]).permutation(self.num_examples)

    def global_batch(self, step):
        """Indices of the B examples of global batch `step` (0-based), in order."""
        start = step * self.global_batch_size
        first_epoch, offset = divmod(start, self.num_examples)
        last_epoch = (start + self.global_batch_size - 1) // self.num_examples
        stream = np.concatenate([self._epoch_order(e) for e in range(first_epoch, last_epoch + 1)])
        return stream[offset : offset + self.global_batch_size]

    def positions(self, shard_index):
        """Where worker `shard_index`'s slice sits in every global batch."""
        return np.arange(shard_index * self.shard_size, (shard_index + 1) * self.shard_size)

    def shard(self, step, shard_index):
        """Indices of worker `shard_index`'s contiguous slice of global batch `step`."""
        return self.global_batch(step)[self.positions(shard_index)]


def random_crop_and_flip(images, step, positions, global_batch_size, seed, pad=4):
    """Pads NHWC images by `pad`, crops back at a random offset, and flips half left-right.

    The random draws are made for the whole global batch from (seed, step) and each example takes
    the draw at its position in the batch, so the augmented global batch is the same whatever the
    worker count, and a resumed run draws the same again.
    """
    rng = np.random.RandomState([seed, step])
    offsets = rng.randint(0, 2 * pad + 1, size=(global_batch_size, 2))[positions]
    flips = (rng.rand(global_batch_size) < 0.5)[positions]
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    height, width = images.shape[1:3]
    out = np.empty_like(images)
    for i, ((dy, dx), flip) in enumerate(zip_strict(offsets, flips)):
        crop = padded[i, dy : dy + height, dx : dx + width]
        out[i] = crop[:, ::-1] if flip else crop
    return out
