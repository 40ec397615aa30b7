"""Faults on in-process clusters (inprocess.py): what a worker does when a peer never comes.
(Killed processes, signals and restarts need real processes: test_clusters.py.)"""

import time

import pytest
from inprocess import forget_cluster, linear, scalar_dataset, scalar_recipe, start_cluster, worker_settings

from parallel_tf.compat import tf
from parallel_tf.training.trainer import Trainer

pytestmark = pytest.mark.inprocess


@pytest.mark.parametrize("mode, num_ps", [("sync", 1), ("allreduce", 0)])
def test_a_step_waiting_on_a_missing_worker_fails_after_the_operation_timeout(tmp_path, mode, num_ps):
    """The chief (and its ps) are up; worker 1 never comes: the chief waits on it (sync: at the barrier of
    its first step; all-reduce: in the broadcast of the initial values) and fails after --operation_timeout
    instead of waiting forever."""
    config, servers = start_cluster(num_ps=num_ps, num_workers=2)
    dataset = scalar_dataset(2, 2)
    fields = {"global_batch_size": 2, "train_steps": 3, "learning_rate": 0.5, "operation_timeout": 2}
    chief = Trainer(
        scalar_recipe(linear, w0=1.0),
        dataset,
        worker_settings(mode, config, 0, tmp_path, {**fields, **({} if num_ps else {"collective_group": 1000})}),
        servers[("worker", 0)].target,
    )
    started = time.time()
    try:
        with pytest.raises(tf.errors.DeadlineExceededError):
            chief.run()
    finally:
        if not num_ps:
            forget_cluster(num_ps, num_workers=2)  # its collectives were aborted
    assert 2 <= time.time() - started < 30
    assert not (tmp_path / "summary.json").exists()
