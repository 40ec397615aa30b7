"""The all-reduce mode keeps sync's promises, on in-process clusters of workers only (inprocess.py):
worked-out steps, bitwise repeats, one worker = the one process, two workers = sync's ordered run
(a + b is b + a), strict determinism = sync's strict run for every worker count, resumes, and a
copy that drifts from the chief's is named."""

import threading

import numpy as np
import pytest
from inprocess import (
    half_mean_square,
    joined_workers,
    linear,
    scalar_dataset,
    scalar_recipe,
    slope,
    train,
    worker_settings,
)
from models import DIGITS, FLAGS, MLP, sha

from parallel_tf import compat
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.graph import codecs, gathered_codes
from parallel_tf.graph.collectives import Collectives
from parallel_tf.training.modes.allreduce import allreduce_transport
from parallel_tf.training.techniques import compression

pytestmark = pytest.mark.inprocess
STRICT = {"strict_determinism": True, "microbatches": 8}
QUADRATIC, ONE_AND_THREE = scalar_recipe(half_mean_square, w0=0.0), scalar_dataset(1, 3)


def w(run):
    return float(run["params"]["model/w:0"][0])


@pytest.mark.parametrize("flags", [{}, {"strict_determinism": True, "microbatches": 2}], ids=["ordered", "strict"])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_allreduce_takes_the_mean_gradient_of_the_global_batch_at_each_step(tmp_path, flags, num_workers):
    """Sync's worked example (test_arithmetic): w ← w - ½ (w - 2): 0 → 1 → 1.5 → 1.75; the chief logs the
    loss of w before each step, ½ ((1 - w)² + (3 - w)²) / 2: 2.5, 1, 0.625, from every worker's loss."""
    run = train(QUADRATIC, ONE_AND_THREE, tmp_path, "allreduce", num_workers=num_workers, **flags)
    assert w(run) == 1.75
    assert [(m["step"], m["loss"]) for m in run["metrics"]] == [(1, 2.5), (2, 1.0), (3, 0.625)]
    assert run["summary"]["final_loss"] == 0.53125
    assert (run["summary"]["mode"], run["summary"]["num_ps"]) == ("allreduce", 0)


def test_one_worker_is_the_one_process_run(tmp_path):
    assert sha(tmp_path / "allreduce", "allreduce", num_workers=1) == sha(tmp_path / "single", "single")


def test_two_workers_are_ordered_sync_with_two_workers_and_repeat(tmp_path):
    """The ring adds two gradients as the ordered tree does (g0 + g1 = g1 + g0), then both divide by 2."""
    first, second = (sha(tmp_path / name, "allreduce") for name in ("first", "second"))
    assert first == second == sha(tmp_path / "sync", "sync")


def test_three_workers_repeat_bitwise_and_are_one_worker_up_to_rounding(tmp_path):
    """Three shard means summed by the ring, not one batch mean: the same model up to float rounding (sync's
    tolerance), and the same bits every time."""
    three = [train(MLP, DIGITS, tmp_path / f"three{i}", "allreduce", num_workers=3, **FLAGS) for i in range(2)]
    one = train(MLP, DIGITS, tmp_path / "one", "allreduce", num_workers=1, **FLAGS)["params"]
    assert three[0]["summary"]["params_sha256"] == three[1]["summary"]["params_sha256"]
    assert max(np.abs(one[name] - three[0]["params"][name]).max() for name in one) < 1e-5


def test_strict_determinism_is_sync_strict_for_1_2_and_4_workers(tmp_path):
    """Every worker gathers all 8 microbatch gradients in worker order and sums them with sync's tree."""
    hashes = {sha(tmp_path / f"allreduce{n}", "allreduce", num_workers=n, **STRICT) for n in (1, 2, 4)}
    assert hashes == {sha(tmp_path / "sync", "sync", num_workers=2, **STRICT)}


@pytest.mark.parametrize(
    "first_workers, then_workers, flags", [(2, 2, {}), (2, 4, STRICT)], ids=["same workers", "2 then 4, strict"]
)
def test_a_resume_ends_bitwise_on_the_uninterrupted_run(tmp_path, first_workers, then_workers, flags):
    """Stopped after 10 steps and resumed to 30: the chief restores its checkpoint and broadcasts it,
    optimizer state (momentum) and global step included; under strict, on another worker count."""
    flags = {**FLAGS, "optimizer": "momentum", **flags}
    train(MLP, DIGITS, tmp_path / "resumed", "allreduce", num_workers=first_workers, **{**flags, "train_steps": 10})
    resumed = train(MLP, DIGITS, tmp_path / "resumed", "allreduce", num_workers=then_workers, **flags)
    whole = train(MLP, DIGITS, tmp_path / "whole", "allreduce", num_workers=first_workers, **flags)
    assert [m["step"] for m in resumed["metrics"]] == [10, 15, 30]  # a run started over keeps no line of step 10
    assert resumed["summary"]["params_sha256"] == whole["summary"]["params_sha256"]


def test_a_copy_that_drifted_from_the_chiefs_is_named(tmp_path):
    """Worker 1's w is moved behind the chief's back: both workers' end-of-run check names it."""
    workers = joined_workers(scalar_recipe(slope, w0=1.0), scalar_dataset(1, 3), tmp_path, "allreduce")
    (_, chief_session), (worker, session) = workers
    (w_on_worker,) = worker.graph.get_collection("trainable_variables")
    w_on_worker.load([0.5], session)
    failures = {}

    def check(trainer, sess):
        named = {"model/w:0": sess.run(trainer.graph.get_collection("trainable_variables")[0])}
        try:
            trainer.train_graph.after_last_step(sess, named)
        except TaskFailure as e:
            failures[trainer.settings.task_index] = str(e)

    threads = [threading.Thread(target=check, args=pair) for pair in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert set(failures) == {0, 1}
    assert failures[0].startswith("worker:1 ended on parameters that differ from the chief's")


NEAR_ONE = scalar_dataset(1 + 2**-12, 3)
# TensorFlow 1.15's CollectiveReduce has no half-precision CPU kernel: such a transport is refused there (below)
HALF_PRECISION = pytest.mark.skipif(compat.tensorflow_1(), reason="TensorFlow 1.15 refuses a half-precision ring")


def test_a_half_precision_transport_is_refused_on_tensorflow_1_in_one_line(monkeypatch):
    monkeypatch.setattr(compat, "tensorflow_1", lambda: True)
    with pytest.raises(ConfigError, match="^--allreduce_transport=bfloat16: TensorFlow 1.15's CollectiveReduce has no"):
        allreduce_transport.check({"allreduce_transport": "bfloat16"}, None)
    allreduce_transport.check({"allreduce_transport": "float32"}, None)


@pytest.mark.parametrize(
    "transport, w1",
    [
        ("float32", 1 + 2**-14),
        pytest.param("float16", 1.0, marks=HALF_PRECISION),
        pytest.param("bfloat16", 1.0, marks=HALF_PRECISION),
    ],
)
def test_a_half_precision_transport_rounds_each_gradient_before_the_ring_adds_them(tmp_path, transport, w1):
    """One step from w = 0 on x = 1 + 2^-12 and 3: the gradients w − x are −(1 + 2^-12) and −3. In float32
    the mean is −(2 + 2^-13) and w ← 0 − ½·mean = 1 + 2^-14. float16 (10 bits after the point) and bfloat16
    (7) round each worker's share, −(1 + 2^-12)/2, to −1/2 before the ring adds: the mean is −2 and w = 1.
    The losses go in float32 whatever the transport, so the logged loss is float32's; a float32 step sends
    [g, loss 0, loss 1] (12 bytes each way with 2 workers), a half one g in 2 bytes and the two losses in 8."""
    quadratic = scalar_recipe(half_mean_square, w0=0.0)
    run = train(quadratic, NEAR_ONE, tmp_path / transport, "allreduce", train_steps=1, allreduce_transport=transport)
    whole = train(quadratic, NEAR_ONE, tmp_path / "whole", "allreduce", train_steps=1)
    assert w(run) == w1
    assert run["metrics"][0]["loss"] == whole["metrics"][0]["loss"]
    assert run["summary"]["bytes_sent_per_step"] == (12 if transport == "float32" else 2 + 8)


@HALF_PRECISION
def test_a_half_precision_run_repeats_bitwise(tmp_path):
    """The ring adds float16 in its fixed order."""
    half = {"allreduce_transport": "float16"}
    first, second = (sha(tmp_path / name, "allreduce", **half) for name in ("first", "second"))
    assert first == second != sha(tmp_path / "float32", "allreduce")


@HALF_PRECISION
def test_float16_shares_of_a_mean_that_fits_do_not_overflow(tmp_path):
    """Two workers' gradients −40000 (linear loss, x = y = 40000: ∂/∂w mean(y (x − w)) = −40000): their sum,
    −80000, is past float16's 65504, their mean is not. Each sends its half, −20000, exact in float16 (a
    multiple of its spacing there, 16); the ring adds −40000 (spacing 32), and w ← 0 − ½·(−40000) = 20000."""
    big = scalar_dataset(40000, 40000)
    run = train(scalar_recipe(linear, w0=0.0), big, tmp_path, "allreduce", train_steps=1, allreduce_transport="float16")
    assert w(run) == 20000.0
    assert run["summary"]["final_loss"] == 40000.0 * (40000.0 - 20000.0)


def test_one_worker_with_buckets_repeats_the_plain_runs_bits(tmp_path):
    """Every variable a bucket of its own, one worker: a bucket's sum is there as soon as its gradient is, so
    an update made then would change a weight backprop still reads for the layer below. Updates wait for
    every mean: five runs, one hash, the one-collective run's (which is the one process's)."""
    plain = sha(tmp_path / "plain", "allreduce", num_workers=1, train_steps=20)
    bucketed = {
        sha(tmp_path / f"r{i}", "allreduce", num_workers=1, train_steps=20, allreduce_bucket_mb=0.0001)
        for i in range(5)
    }
    assert bucketed == {plain}


def test_random_codes_draw_from_the_runs_seed_as_on_the_parameter_servers(tmp_path):
    """QSGD's roundings at seed 1: every worker draws from stream seed·2¹⁶ + worker on all-reduce as on the
    parameter servers, so the gathered codes of two workers train sync's bits at every seed."""
    codes = {**FLAGS, "gradient_compression": "qsgd:4", "seed": 1}
    gathered = train(MLP, DIGITS, tmp_path / "allreduce", "allreduce", **codes)["summary"]["params_sha256"]
    assert (
        gathered == sha(tmp_path / "sync", "sync", **codes) != sha(tmp_path / "seed0", "sync", **{**codes, "seed": 0})
    )
    settings = worker_settings("single", None, 1, None, {**FLAGS, "seed": 1})
    assert settings.random_stream == 1 * 2**16 + 1


def test_buckets_are_counted_and_two_workers_train_the_one_collective_s_bits(tmp_path):
    """The MLP's gradients, last layer first: logits/b (40 bytes) and logits/w (5,120) pass 5 KB and close
    a bucket, hidden/b (512) and hidden/w (32,768) the second. With two workers each element's sum is
    a + b in whichever bucket it crosses: the one-collective run's bits."""
    run = train(MLP, DIGITS, tmp_path / "bucketed", "allreduce", **FLAGS, allreduce_bucket_mb=0.005)
    assert run["summary"]["allreduce_buckets"] == 2
    assert run["summary"]["params_sha256"] == sha(tmp_path / "one", "allreduce")


def test_buckets_of_four_workers_repeat_bitwise(tmp_path):
    """Every variable a bucket of its own (4): the ring's order within each is fixed, so the bits repeat."""
    runs = [
        train(MLP, DIGITS, tmp_path / f"r{i}", "allreduce", num_workers=4, **FLAGS, allreduce_bucket_mb=1e-6)
        for i in range(2)
    ]
    assert runs[0]["summary"]["allreduce_buckets"] == 4
    assert runs[0]["summary"]["params_sha256"] == runs[1]["summary"]["params_sha256"]


def test_gathered_8bit_codes_by_hand_and_the_residual_kept():
    """One worker, v = [0.5, −1, 0.26]: max|v| = 1, codes round(127 v) = [64 (63.5, to even), −127, 33],
    decoded [64, −127, 33]/127; the residual keeps v minus that, which the next step's gradient adds."""
    with tf.Graph().as_default():
        gradient = tf.placeholder(tf.float32, [3])
        collectives = Collectives(1, 0, group=1, on_gpu=False)
        seed = [tf.constant([0, 0], tf.int64)]
        (mean,), sent = gathered_codes.mean_of_codes([gradient], collectives, codecs.parse("8bit"), True, seed)
        with tf.Session() as sess:
            sess.run(tf.local_variables_initializer())
            np.testing.assert_array_equal(
                sess.run(mean, {gradient: [0.5, -1.0, 0.26]}), np.float32([64, -127, 33]) / 127
            )
            (residual,) = tf.local_variables()
            np.testing.assert_allclose(sess.run(residual), [0.5 - 64 / 127, 0.0, 0.26 - 33 / 127], atol=1e-7)
            assert [part.dtype for part in sent] == [tf.int8, tf.float32]


def test_gathered_8bit_codes_of_two_workers_are_sync_8bit_s_bits_and_bytes(tmp_path):
    """Each worker decodes both workers' codes and adds them as sync's parameter server does: the same bits.
    Bytes: the MLP's 9,610 int8 codes go as 2,403 int32 words (9,612 bytes) and its 4 scales as 16, gathered
    from the other worker, and the two losses' 8 bytes by their own all-reduce: 9,636 each way; the payload
    itself is 9,626 bytes (n + 4 per variable)."""
    codes = {**FLAGS, "gradient_compression": "8bit"}
    gathered = train(MLP, DIGITS, tmp_path / "allreduce", "allreduce", **codes)["summary"]
    assert gathered["params_sha256"] == sha(tmp_path / "sync", "sync", **codes)
    assert gathered["bytes_sent_per_step"] == gathered["bytes_received_per_step"] == 9636
    assert gathered["bytes_per_push"] == 9626


def test_gathered_random_codes_of_four_workers_repeat_bitwise(tmp_path):
    """QSGD draws each worker's roundings from (step, worker·2¹⁶ + variable), and every worker decodes and adds
    the four payloads in worker order: a repeat draws and adds the same."""
    codes = {**FLAGS, "gradient_compression": "qsgd:4"}
    first, second = (train(MLP, DIGITS, tmp_path / run, "allreduce", num_workers=4, **codes) for run in "ab")
    assert first["summary"]["params_sha256"] == second["summary"]["params_sha256"]
    assert first["summary"]["declared"]["compression"]["algorithm"] == "QSGD"


@pytest.mark.parametrize("workers, refused", [(7, False), (8, True)])
def test_gathering_codes_is_refused_where_it_sends_more_than_the_float_ring(workers, refused):
    """The MLP's 8-bit payload, 9,626 bytes, from each of N − 1 workers, against the ring's 2(N−1)/N·4·9,610:
    at 7 workers 57,756 against 65,897; at 8, 67,382 against 67,270."""
    shapes = [[64, 128], [128], [128, 10], [10]]
    values = {"mode": "allreduce", "gradient_compression": "8bit"}
    cluster = cluster_lib.parse({"cluster": {"worker": [f"127.0.0.1:{1 + w}" for w in range(workers)]}}, "test")
    check = lambda: compression.check_shapes(values, cluster, shapes)  # noqa: E731
    if not refused:
        check()
        return
    with pytest.raises(ConfigError, match=r"^--gradient_compression=8bit over all-reduce gathers 67382 bytes a "):
        check()


@pytest.mark.parametrize(
    "mode, flags",
    [
        ("allreduce", {"powersgd_rank": 1}),
        ("allreduce", {"gradient_compression": "8bit"}),
        ("sync", {"gradient_compression": "8bit"}),
    ],
    ids=["PowerSGD", "gathered 8-bit codes", "8-bit codes to the parameter servers"],
)
def test_a_run_with_error_feedback_trained_on_ends_on_the_straight_runs_bits(tmp_path, mode, flags):
    """Each worker's error (PowerSGD's e, a codec's residual) is copied into the checkpoint with the parameters
    and set again as the worker joins: 15 steps, then on to 30, train what 30 straight do."""
    flags = {**FLAGS, **flags}
    train(MLP, DIGITS, tmp_path / "resumed", mode, **{**flags, "train_steps": 15})
    resumed = train(MLP, DIGITS, tmp_path / "resumed", mode, **flags)
    assert resumed["summary"]["params_sha256"] == sha(tmp_path / "whole", mode, **flags)
