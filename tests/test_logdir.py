"""The logdir rules: a finished run is never overwritten, an unfinished one is resumed only by the
same run, and --fresh moves the old one aside rather than deleting it."""

import dataclasses
import json

import models
import pytest
from absl import flags

from parallel_tf import compat
from parallel_tf.errors import ConfigError
from parallel_tf.training import logdir, task_settings
from parallel_tf.training.checkpoints import Checkpoints
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
        ConfigError, match="run that this command is not: seed 0, here 3; a resume may change --train_steps, nothing"
    ):
        check_same_run(str(tmp_path), dict(IDENTITY, seed=3))
    with pytest.raises(ConfigError, match=r"a resume may change --train_steps, --num_workers or --steps_per_run, "):
        check_same_run(str(tmp_path), dict(IDENTITY, seed=3), ["--train_steps", "--num_workers", "--steps_per_run"])


def test_a_portable_resume_may_take_another_thread_count_and_a_fast_one_may_not(tmp_path):
    """No portable bit depends on the thread count (tests/test_portable_bits.py); the fast kernels' products may."""
    for kernels in ("portable", "fast"):
        (tmp_path / kernels).mkdir()
        record_run(str(tmp_path / kernels), dict(IDENTITY, kernels=kernels, intra_op_threads=2))
    check_same_run(str(tmp_path / "portable"), dict(IDENTITY, kernels="portable", intra_op_threads=1))
    with pytest.raises(ConfigError, match=r"is not: intra_op_threads 2, here 1; a resume may change --train_steps"):
        check_same_run(str(tmp_path / "fast"), dict(IDENTITY, kernels="fast", intra_op_threads=1))
    with pytest.raises(ConfigError, match=r"intra_op_threads 2, here 1; kernels portable, here fast; "):
        check_same_run(str(tmp_path / "portable"), dict(IDENTITY, kernels="fast", intra_op_threads=1))


def test_a_key_recorded_on_one_side_only_is_a_difference(tmp_path):
    """A run recorded with a schedule, resumed by a command without one, and the other way round; a finished
    run being trained on is called finished, and the line says what may change."""
    record_run(str(tmp_path), dict(IDENTITY, lr_schedule="cosine"))
    with pytest.raises(ConfigError, match=r"unfinished run that this command is not: lr_schedule cosine, here unset; "):
        check_same_run(str(tmp_path), IDENTITY)
    (tmp_path / "summary.json").write_text(json.dumps({"train_steps": 200}))
    with pytest.raises(ConfigError, match=r"a run finished at step 200 that this command is not: lr_schedule cosine"):
        check_same_run(str(tmp_path), IDENTITY)
    with pytest.raises(ConfigError, match=r"is not: model unset, here cnn; a resume may change --train_steps, "):
        check_same_run(str(tmp_path), dict(IDENTITY, lr_schedule="cosine", model="cnn"))


def test_a_record_of_records_differs_by_the_keys_inside_it_and_names_the_rest(tmp_path):
    """The schedule and the environment are records of their own: a refusal says which of their keys differ,
    not the two records whole, three differences in full and the others by name."""
    schedule = {"kind": "constant", "warmup_steps": 0, "decay_steps": 0}
    record_run(str(tmp_path), dict(IDENTITY, learning_rate_schedule=schedule, environment={"ONEDNN": None}))
    changed = dict(
        IDENTITY, seed=1, learning_rate_schedule=dict(schedule, warmup_steps=50), environment={"ONEDNN": "1"}
    )
    with pytest.raises(ConfigError) as refused:
        check_same_run(str(tmp_path), dict(changed, optimizer="adam"))
    assert (
        "is not: environment.ONEDNN unset, here 1; learning_rate_schedule.warmup_steps 0, here 50; seed 0, here 1 "
        "(and 1 more: optimizer); a resume may change --train_steps, nothing else"
    ) in str(refused.value)


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


@pytest.mark.parametrize(
    "kernels, variable",
    [(kernels, name) for name, moves in compat.BITS_ENVIRONMENT.items() for kernels in moves],
)
def test_each_variable_that_moves_a_runs_bits_is_part_of_what_a_resume_must_match(
    tmp_path, monkeypatch, kernels, variable
):
    """A run recorded under one environment, resumed under another value of each variable that moves its kernels'
    bits (compat.BITS_ENVIRONMENT): refused, naming it. A variable that moves no bit of portable kernels (oneDNN's
    instruction-set cap) is not recorded for them, so a portable run resumes on any machine."""
    for name in compat.BITS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    settings = dataclasses.replace(models.DEFAULTS, kernels=kernels)
    record_run(str(tmp_path), logdir.run_identity("mnist", settings))
    monkeypatch.setenv(variable, "AVX2")  # another cap, or an arithmetic mode
    with pytest.raises(ConfigError, match=rf"is not: environment\.{variable} unset, here AVX2; a resume may"):
        check_same_run(str(tmp_path), logdir.run_identity("mnist", settings))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    if kernels == "portable" and variable != "ONEDNN_MAX_CPU_ISA":
        monkeypatch.delenv(variable)
        check_same_run(str(tmp_path), logdir.run_identity("mnist", settings))


def test_the_recipes_flags_are_its_own_not_those_tensorflow_defines_as_it_loads():
    """A task forked with TensorFlow loaded (launch/forkserver.py) reads its flags after TensorFlow defined a few of
    its own (--delta_threshold, ...); a task started by hand reads them before. Both record the same run."""
    defined_by = flags.FLAGS.flags_by_module_dict()
    tensorflows = {
        flag.name for module, defined in defined_by.items() if module.startswith("tensorflow.") for flag in defined
    }
    assert tensorflows, "TensorFlow loaded in this process (conftest) defines flags of its own"
    assert not tensorflows & {name for name, _ in task_settings.recipe_flags(flags.FLAGS)}


def test_a_resume_that_switches_kernels_is_refused(tmp_path):
    """A run's kernels are part of what it computes: a portable run resumed with --kernels=fast is another run."""
    record_run(str(tmp_path), logdir.run_identity("mnist", models.DEFAULTS))
    fast = dataclasses.replace(models.DEFAULTS, kernels="fast")
    with pytest.raises(ConfigError, match=r"is not: kernels portable, here fast; a resume may change --train_steps"):
        check_same_run(str(tmp_path), logdir.run_identity("mnist", fast))


def test_a_checkpoint_without_a_variable_of_the_graph_is_refused_in_one_line(tmp_path):
    """A resume of a checkpoint written by another graph (another version of the package) is a mistake no restart
    cures: one line naming the variable it lacks, and the cure."""
    tf = compat.tf
    with tf.Graph().as_default(), tf.Session() as sess:
        kept = tf.get_variable("kept", [], initializer=tf.ones_initializer())
        written = Checkpoints(str(tmp_path), [kept])
        sess.run(written.init_op)
        written.save(sess, 10)
    with tf.Graph().as_default(), tf.Session() as sess:
        both = [tf.get_variable(name, [], initializer=tf.zeros_initializer()) for name in ("kept", "added")]
        resumed = Checkpoints(str(tmp_path), both)
        sess.run(resumed.init_op)
        with pytest.raises(ConfigError) as refused:
            resumed.restore(sess)
    assert str(refused.value) == (
        f"{tmp_path}/model.ckpt-10 has no added, which this run's graph has: it was written by another version of "
        "parallel_tf; resume it with that version, or give --fresh to start over"
    )
