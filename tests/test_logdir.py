"""The logdir rules: a finished run is never overwritten, an unfinished one is resumed only by the
same run, and --fresh moves the old one aside rather than deleting it."""

import json

import pytest

from parallel_tf.errors import ConfigError
from parallel_tf.training.logdir import check_same_run, default_logdir, prepare_logdir, record_run

IDENTITY = {"recipe": "mnist", "seed": 0, "global_batch_size": 120}


def test_a_finished_run_is_refused_and_fresh_moves_it_aside(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    (logdir / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a finished run .* pass --fresh"):
        prepare_logdir(str(logdir))
    moved_to = prepare_logdir(str(logdir), fresh=True)
    assert json.loads((tmp_path / moved_to.rsplit("/", 1)[1] / "summary.json").read_text()) == {}
    assert moved_to.startswith(f"{logdir}.old-") and list(logdir.iterdir()) == []
    second = prepare_logdir(str(logdir / ".." / "run"), fresh=True)  # empty now: nothing to move
    assert second is None


def test_an_unfinished_run_is_not_refused(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 20}\n')
    assert prepare_logdir(str(tmp_path)) is None
    assert (tmp_path / "metrics.jsonl").exists()


def test_a_recorded_run_accepts_the_same_run_and_refuses_another(tmp_path):
    check_same_run(str(tmp_path), IDENTITY)  # nothing recorded yet
    record_run(str(tmp_path), IDENTITY)
    assert json.loads((tmp_path / "run.json").read_text()) == IDENTITY
    check_same_run(str(tmp_path), IDENTITY)  # the same command again: a resume
    with pytest.raises(
        ConfigError, match="run that this command is not: seed 0, here 3; only --train_steps may change"
    ):
        check_same_run(str(tmp_path), dict(IDENTITY, seed=3))


def test_a_key_recorded_on_one_side_only_is_a_difference(tmp_path):
    """A run recorded with a schedule, resumed by a command without one, and the other way round; a finished
    run being trained on is called finished, and the line says what may change."""
    record_run(str(tmp_path), dict(IDENTITY, lr_schedule="cosine"))
    with pytest.raises(
        ConfigError, match=r"unfinished run that this command is not: lr_schedule cosine, here \(none\)"
    ):
        check_same_run(str(tmp_path), IDENTITY)
    (tmp_path / "summary.json").write_text(json.dumps({"train_steps": 200}))
    with pytest.raises(ConfigError, match=r"a run finished at step 200 that this command is not: lr_schedule cosine"):
        check_same_run(str(tmp_path), IDENTITY)
    with pytest.raises(ConfigError, match=r"is not: model \(none\), here cnn; only --train_steps may change to resume"):
        check_same_run(str(tmp_path), dict(IDENTITY, lr_schedule="cosine", model="cnn"))


def test_a_resume_may_run_on_another_network(tmp_path):
    """run.json says the link a run started on; a resume on another link (or none) is the same run."""
    linked = dict(IDENTITY, network={"link_rate": "100mbit", "bits_per_second": 1e8, "link_delay_ms": 0.0})
    record_run(str(tmp_path), linked)
    assert json.loads((tmp_path / "run.json").read_text())["network"]["link_rate"] == "100mbit"
    check_same_run(str(tmp_path), dict(linked, network={"link_rate": "1gbit", "bits_per_second": 1e9}))
    check_same_run(str(tmp_path), IDENTITY)


def test_default_logdirs_started_in_the_same_second_differ(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = default_logdir("mnist", "sync"), default_logdir("mnist", "sync")
    assert first != second and (tmp_path / first).is_dir() and (tmp_path / second).is_dir()


def test_a_finished_run_trains_on_when_asked_for_more_steps(tmp_path):
    """--train_steps may grow: a finished run of 1000 steps trains on to 2000 from its last checkpoint
    (test_equalities.py: it ends on the straight run); the same or fewer steps are refused, saying so."""
    (tmp_path / "summary.json").write_text(json.dumps({"train_steps": 1000}))
    assert prepare_logdir(str(tmp_path), train_steps=2000) is None
    with pytest.raises(ConfigError) as refused:
        prepare_logdir(str(tmp_path), train_steps=1000)
    assert str(refused.value) == (
        f"--logdir={tmp_path} already holds a finished run (summary.json of 1000 steps); choose another --logdir, "
        "pass --fresh to move it aside and start over, or a --train_steps above 1000 to train it on"
    )


def test_tensorboard_after_a_resume_shows_each_step_once_and_every_worker_s_counter(tmp_path):
    """A run logged steps 1-3, was interrupted after its checkpoint at 2, and resumed: step 3 is logged
    again. TensorBoard, as metrics.jsonl, shows 1, 2 and the resumed 3 (not the lost 3 beside it); a
    counter by worker shows as one scalar each."""
    from tensorboard.backend.event_processing import event_accumulator

    from parallel_tf.compat import tf
    from parallel_tf.training.outputs import RunWriter

    interrupted = RunWriter(str(tmp_path), tf.Graph())
    for step in (1, 2, 3):
        interrupted.log_step(step, float(step), 1.0, updates_by_worker=[step, 2 * step])
    interrupted._events.close()
    resumed = RunWriter(str(tmp_path), tf.Graph(), first_step=2)
    resumed.log_step(3, 30.0, 1.0, updates_by_worker=[3, 6])
    resumed._events.close()
    board = event_accumulator.EventAccumulator(str(tmp_path))  # what `tensorboard --logdir` reads
    board.Reload()
    assert [(e.step, e.value) for e in board.Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert [e.value for e in board.Scalars("updates_by_worker/1")] == [2.0, 4.0, 6.0]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["loss"]) for m in metrics] == [(1, 1.0), (2, 2.0), (3, 30.0)]
