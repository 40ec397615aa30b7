import numpy as np
import pytest

from parallel_tf.data.sharding import GlobalBatchSharder, random_crop_and_flip
from parallel_tf.errors import ConfigError


def test_global_batch_is_the_same_examples_for_any_worker_count():
    batches = {}
    for workers in (1, 2, 3, 4, 8):
        sharder = GlobalBatchSharder(num_examples=1000, global_batch_size=120, num_shards=workers, seed=7)
        batches[workers] = [np.concatenate([sharder.shard(step, i) for i in range(workers)]) for step in range(20)]
    for workers in (2, 3, 4, 8):
        for step in range(20):
            np.testing.assert_array_equal(batches[workers][step], batches[1][step])


def test_worker_takes_its_contiguous_slice():
    sharder = GlobalBatchSharder(num_examples=50, global_batch_size=12, num_shards=3, seed=0)
    batch = sharder.global_batch(5)
    np.testing.assert_array_equal(sharder.shard(5, 0), batch[0:4])
    np.testing.assert_array_equal(sharder.shard(5, 2), batch[8:12])


def test_each_epoch_is_a_fresh_permutation_crossing_epoch_boundaries():
    sharder = GlobalBatchSharder(num_examples=10, global_batch_size=4, num_shards=1, seed=3)
    stream = np.concatenate([sharder.global_batch(step) for step in range(5)])  # 20 = two epochs
    first, second = stream[:10], stream[10:]
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(10))
    assert list(first) != list(range(10)), "shuffling must stay on"
    assert list(first) != list(second), "each epoch has its own order"
    np.testing.assert_array_equal(sharder.global_batch(2), stream[8:12])  # batch 2 spans both epochs


def test_order_depends_on_seed_and_nothing_else():
    a = GlobalBatchSharder(100, 10, 2, seed=1)
    b = GlobalBatchSharder(100, 10, 2, seed=1)
    c = GlobalBatchSharder(100, 10, 2, seed=2)
    np.testing.assert_array_equal(a.shard(37, 1), b.shard(37, 1))  # random access: no state
    assert list(a.global_batch(0)) != list(c.global_batch(0))


def test_batch_must_divide_by_worker_count():
    with pytest.raises(ConfigError, match="--global_batch_size=100 is not divisible by the worker count 3"):
        GlobalBatchSharder(1000, 100, 3, seed=0)


def test_augmentation_of_the_global_batch_is_the_same_for_any_worker_count():
    images = np.random.RandomState(0).rand(12, 8, 8, 3).astype(np.float32)
    whole = random_crop_and_flip(images, step=5, positions=np.arange(12), global_batch_size=12, seed=1)
    for workers in (2, 3, 4):
        sharder = GlobalBatchSharder(100, 12, workers, seed=1)
        parts = [
            random_crop_and_flip(images[sharder.positions(i)], 5, sharder.positions(i), 12, seed=1)
            for i in range(workers)
        ]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert not np.array_equal(whole, images), "augmentation changes the images"
    other_step = random_crop_and_flip(images, step=6, positions=np.arange(12), global_batch_size=12, seed=1)
    assert not np.array_equal(whole, other_step), "each step draws anew"


def test_crop_and_flip_keep_pixels_of_the_image():
    image = np.arange(4 * 4, dtype=np.float32).reshape(1, 4, 4, 1)
    out = random_crop_and_flip(image, step=0, positions=np.arange(1), global_batch_size=1, seed=0, pad=0)
    assert np.array_equal(out, image) or np.array_equal(out, image[:, :, ::-1])  # pad 0: only a flip
