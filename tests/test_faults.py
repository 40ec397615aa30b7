"""Faults on in-process clusters (inprocess.py): what a worker does when a peer never comes.
(Killed processes, signals and restarts need real processes: test_clusters.py.)"""

import time
from types import SimpleNamespace

import pytest
from inprocess import forget_cluster, linear, scalar_dataset, scalar_recipe, start_cluster, worker_settings

from parallel_tf import compat
from parallel_tf.compat import tf
from parallel_tf.training import watchdog
from parallel_tf.training.trainer import Trainer

pytestmark = pytest.mark.inprocess


@pytest.mark.parametrize("mode, num_ps", [("sync", 1), ("allreduce", 0)])
def test_a_step_waiting_on_a_missing_worker_fails_after_the_operation_timeout(tmp_path, mode, num_ps):
    """The chief (and its ps) are up; worker 1 never comes: the chief waits on it (sync: at the barrier of
    its first step; all-reduce: in the broadcast of the initial values) and fails after --operation_timeout
    instead of waiting forever. TensorFlow 1.15's collectives wait on whatever the timeout: there a task's own
    watch ends the process (training/watchdog.py), which no test process can let it do: the next test checks it."""
    if mode == "allreduce" and compat.tensorflow_1():
        pytest.skip("TensorFlow 1.15's collectives ignore the timeout; a task's watchdog ends its process instead")
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


def test_the_watch_ends_a_task_whose_session_runs_stall_after_the_timeout(monkeypatch):
    """A trainer that ran 3 session runs and then none: with --operation_timeout=2 (and --startup_timeout=1 before
    the first run, passed here already), the watch says why 2 to 4 s after the last run ended, once."""
    monkeypatch.setattr(watchdog, "POLL_SECS", 0.1)
    trainer = SimpleNamespace(session_runs=0)
    settings = SimpleNamespace(operation_timeout=2.0, startup_timeout=1.0)
    failures = []
    thread = watchdog.watch(trainer, settings, failures.append)
    time.sleep(0.3)
    trainer.session_runs = 3
    stalled = time.monotonic()
    thread.join(10)
    assert 2 <= time.monotonic() - stalled < 4 and not thread.is_alive()
    assert failures == [
        "DeadlineExceededError: no step ended within --operation_timeout=2s (a collective waits on a worker that is "
        "gone; TensorFlow 1.15's collectives do not time out, so this task's watch ended it)"
    ]
