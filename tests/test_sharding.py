import numpy as np
import pytest

from parallel_tf.data import GlobalBatchSharder
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
