"""Gradient compression: the codecs' numbers worked out by hand, error feedback losing nothing, only
the payload crossing to the parameter servers, and compressed training on in-process clusters."""

from types import SimpleNamespace

import numpy as np
import pytest
from inprocess import train, worker_settings
from models import DIGITS, FLAGS, MLP

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.data.sharding import Dataset
from parallel_tf.errors import ConfigError
from parallel_tf.graph import codecs
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.settings import Options, run_settings
from parallel_tf.training.techniques import compression
from parallel_tf.training.trainer import build_graph

V = [0.3, -1.0, 0.25]


def run(tensors, feed=None):
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        return sess.run(tensors, feed)


def roundtrip(codec, values):
    with tf.Graph().as_default():
        v = tf.constant(values, tf.float32)
        payload = codec.encode(v, tf.constant([0, 0], tf.int64))
        return run([payload, codec.decode(payload, len(values))])


def test_8bit_scales_by_the_largest_magnitude():
    """q = round(127 v / max|v|) = round([38.1, -127, 31.75]) = [38, -127, 32]; decoded q / 127."""
    (q, scale), decoded = roundtrip(codecs.EightBit(), V)
    assert q.dtype == np.int8 and q.tolist() == [38, -127, 32] and scale == 1.0
    np.testing.assert_allclose(decoded, [0.299213, -1.0, 0.251969], atol=1e-6)


def test_1bit_packs_signs_eight_to_a_byte_with_the_mean_magnitude():
    """Signs of [0.5, -1, 0.25, 2, -0.75, 0, 3, -4 | 1]: bits 10110110 | 1(0000000) = bytes 182, 128;
    scale mean|v| = 12.5 / 9; zero counts as positive."""
    values = [0.5, -1, 0.25, 2, -0.75, 0, 3, -4, 1]
    (packed, scale), decoded = roundtrip(codecs.OneBit(), values)
    assert packed.dtype == np.uint8 and packed.tolist() == [182, 128]
    assert scale == pytest.approx(12.5 / 9)
    np.testing.assert_allclose(decoded, np.where(np.array(values) >= 0, 1, -1) * 12.5 / 9, rtol=1e-6)


def test_topk_sends_the_largest_magnitudes_and_their_indices():
    (values, indices), decoded = roundtrip(codecs.TopK(2), [0.3, -1.0, 0.25, 0.5])
    assert values.tolist() == [-1.0, 0.5] and indices.dtype == np.int32 and indices.tolist() == [1, 3]
    assert decoded.tolist() == [0.0, -1.0, 0.0, 0.5]


def test_qsgd_rounds_each_level_up_with_the_probability_of_its_fraction():
    """v = [3, -4, 0], ‖v‖ = 5, S = 2: |v|·S/‖v‖ = [1.2, 1.6, 0], between levels 1 and 2 (and 0). With draws
    u = [0.7, 0.3, 0.99], floor(1.2 + 0.7) = 1, floor(1.6 + 0.3) = 1, floor(0.99) = 0: levels [1, -1, 0],
    decoded ‖v‖/S · levels = [2.5, -2.5, 0]; with u = [0.8, 0.4, 0] the first two round up: [5, -5, 0]."""
    codec = codecs.parse("qsgd:2")
    with tf.Graph().as_default():
        v, uniform = tf.constant([3.0, -4.0, 0.0]), tf.placeholder(tf.float32, [3])
        payload = codec.encode_with(v, uniform)
        decoded = codec.decode(payload, 3)
        with tf.Session() as sess:
            (levels, norm), low = sess.run([payload, decoded], {uniform: [0.7, 0.3, 0.99]})
            high = sess.run(decoded, {uniform: [0.8, 0.4, 0.0]})
    assert levels.dtype == np.int8 and levels.tolist() == [1, -1, 0] and norm == 5.0
    assert low.tolist() == [2.5, -2.5, 0.0] and high.tolist() == [5.0, -5.0, 0.0]


@pytest.mark.parametrize("name, scale", [("qsgd:2", 5.0 / 2), ("terngrad", 4.0)])
def test_random_codecs_are_unbiased_and_their_draws_follow_the_seed(name, scale):
    """E[decoded] = v: over 4000 seeds, the mean of each element is within 4 standard errors of v, the
    variance of one element being (its level's step)² p(1 - p), p the fraction it rounds up with: QSGD's step
    is ‖v‖/S = 5/2, TernGrad's max|v| = 4. One seed always draws the same, and the seeds draw every rounding
    there is."""
    codec, v = codecs.parse(name), np.array([3.0, -4.0, 0.5, 0.0], np.float32)
    with tf.Graph().as_default():
        seed = tf.placeholder(tf.int64, [2])
        decoded = codec.decode(codec.encode(tf.constant(v), seed), 4)
        with tf.Session() as sess:
            draws = np.array([sess.run(decoded, {seed: [step, 7]}) for step in range(4000)])
            again = sess.run(decoded, {seed: [0, 7]})
    fraction = np.abs(v) / scale % 1
    standard_error = scale * np.sqrt(fraction * (1 - fraction) / len(draws))
    assert np.all(np.abs(draws.mean(0) - v) <= 4 * standard_error + 1e-6)
    np.testing.assert_array_equal(again, draws[0])
    rounded = np.count_nonzero(fraction)  # elements between two levels, each drawn up or down
    assert len({tuple(d) for d in draws}) == 2**rounded


def test_qsgd_takes_a_norm_per_bucket():
    """qsgd:2:3 on [3, −4, 0 | 0.6, −0.8]: buckets of 3, norms 5 and 1, so |v|·S/‖bucket‖ = [1.2, 1.6, 0 | 1.2,
    1.6]; draws u = [0.7, 0.3, 0.99, 0.8, 0.4] give floor(1.9) = 1, 1, 0 | floor(2.0) = 2, 2: levels [1, −1, 0,
    2, −2], decoded ‖bucket‖/S · level = [2.5, −2.5, 0, 1, −1]. One norm for all five (‖v‖ = √26) would send
    the last two as 0."""
    codec = codecs.parse("qsgd:2:3")
    with tf.Graph().as_default():
        v, uniform = tf.constant([3.0, -4.0, 0.0, 0.6, -0.8]), tf.constant([0.7, 0.3, 0.99, 0.8, 0.4])
        payload = codec.encode_with(v, uniform)
        (levels, norms), decoded = run([payload, codec.decode(payload, 5)])
    assert levels.tolist() == [1, -1, 0, 2, -2]
    np.testing.assert_allclose(norms, [5.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(decoded, [2.5, -2.5, 0.0, 1.0, -1.0], rtol=1e-6)


def test_terngrad_sends_signs_with_the_probability_of_their_share_of_the_largest():
    """v = [0.5, −1, 0.25, 0, 2], s = max|v| = 2, |v|/s = [0.25, 0.5, 0.125, 0, 1]; draws u = [0.8, 0.6, 0.9,
    0.5, 0] give floor(|v|/s + u) = [1, 1, 1, 0, 1]: ternary [1, −1, 1, 0, 1], codes (+1) [2, 0, 2, 1, 2] packed
    four to a byte (64, 16, 4, 1): 2·64 + 0 + 2·4 + 1 = 137, then 2·64 = 128; decoded s · ternary."""
    with tf.Graph().as_default():
        v, uniform = tf.constant([0.5, -1.0, 0.25, 0.0, 2.0]), tf.constant([0.8, 0.6, 0.9, 0.5, 0.0])
        payload = codecs.TernGrad().encode_with(v, uniform)
        (packed, scale), decoded = run([payload, codecs.TernGrad().decode(payload, 5)])
    assert packed.dtype == np.uint8 and packed.tolist() == [137, 128] and scale == 2.0
    assert decoded.tolist() == [2.0, -2.0, 2.0, 0.0, 2.0]


@pytest.mark.parametrize(
    "name, feedback, algorithm",
    [
        ("8bit", None, ("8-bit", True)),
        ("8bit", False, ("8-bit", False)),
        ("qsgd:4", None, ("QSGD", False, {"bucket": 128})),
        ("qsgd:4:512", True, ("EF-QSGD", True, {"bucket": 512})),
        ("terngrad", None, ("TernGrad", False)),
    ],
)
def test_error_feedback_is_the_codec_papers_unless_given_and_the_record_names_what_ran(name, feedback, algorithm):
    """The run's settings settle --error_feedback (None: as the paper does), so everything that reads the flag
    says what ran: the technique, run.json and summary.json's top-level flags as much as its `declared` record."""
    given = {"gradient_compression": name, **({"error_feedback": feedback} if feedback is not None else {})}
    cluster = cluster_lib.assign_jobs(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], 1, 0, "sync on 2 workers")
    settings = run_settings(set(given), **{**vars(DEFAULTS_OF_A_WORKER), "mode": "sync", "cluster": cluster}, **given)
    assert settings.options.error_feedback == settings.arithmetic_options()["error_feedback"] == algorithm[1]
    assert compression.record(settings) == {
        "gradient_compression": name,
        "error_feedback": algorithm[1],
        "algorithm": algorithm[0],
        **(algorithm[2] if len(algorithm) > 2 else {}),
    }


DEFAULTS_OF_A_WORKER = SimpleNamespace(
    job_name="worker",
    task_index=0,
    global_batch_size=120,
    train_steps=20,
    learning_rate=0.1,
    optimizer="sgd",
    seed=0,
    logdir=None,
    dataset="digits",
)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("8bit", 1000 + 4),
        ("1bit", 125 + 4),
        ("topk:10", 80),
        ("qsgd:127", 1000 + 4 * 8),
        ("qsgd:127:1000", 1000 + 4),
        ("terngrad", 250 + 4),
    ],
)
def test_payload_bytes_measured_are_the_analytic_size(name, expected):
    """The bytes of the tensors a worker sends for 1000 float32 (4000 bytes), measured on their values."""
    codec = codecs.parse(name)
    payload, _ = roundtrip(codec, np.random.default_rng(0).normal(size=1000).tolist())
    assert sum(np.asarray(part).nbytes for part in payload) == expected == codec.payload_bytes(1000)


def test_error_feedback_keeps_what_8bit_lost_and_loses_nothing_over_steps():
    """Step 1 (v = g): q = [38, -127, 32], decoded [0.299213, -1, 0.251969], residual v - decoded =
    [0.000787, 0, -0.001969]. Over 50 more steps of varied gradients, the decoded updates plus the
    final residual sum to the gradients, to 1e-6 (summed in float64 here)."""
    options = Options(gradient_compression="8bit", error_feedback=True)
    with tf.Graph().as_default():
        gradient = tf.placeholder(tf.float32, [3])
        destination = tf.Variable(tf.zeros([3]))
        (decoded,) = compression.Compression().transmit(
            SimpleNamespace(options=options), [gradient], [destination], "/device:CPU:0", stream=0
        )
        (residual,) = tf.local_variables()
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            first = sess.run(decoded, {gradient: V})
            np.testing.assert_allclose(first, [0.299213, -1.0, 0.251969], atol=1e-6)
            np.testing.assert_allclose(sess.run(residual), [0.000787, 0.0, -0.001969], atol=1e-6)
            gradients = np.random.default_rng(1).normal(size=(50, 3)).astype(np.float32)
            applied = sum(sess.run(decoded, {gradient: g}).astype(np.float64) for g in gradients) + first
            np.testing.assert_allclose(applied + sess.run(residual), gradients.sum(0, np.float64) + V, atol=1e-6)


def test_only_the_payload_is_on_the_worker_and_the_decoding_is_on_the_parameter_server():
    """Wherever the gradient was computed (here on the ps, as a push hook could leave it), the encoding and
    the residual are on the worker named, and the decoding next to the variable."""
    options = Options(gradient_compression="8bit", error_feedback=True)
    worker = "/job:worker/task:1/device:CPU:0"
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0/device:CPU:0"):
            destination = tf.Variable(tf.zeros([3]))
            gradient = tf.constant(V)
        hooks = compression.Compression()
        (decoded,) = hooks.transmit(SimpleNamespace(options=options), [gradient], [destination], worker, stream=1)
        payloads = hooks.payloads
        assert [p.dtype for p in payloads] == [tf.int8, tf.float32]
        assert all(p.device == worker for p in payloads)
        assert [v.device for v in tf.local_variables()] == [worker]  # the residual
        assert decoded.op.colocation_groups() == destination.op.colocation_groups()


@pytest.mark.parametrize("mode, servers", [("sync", {"ps": ["127.0.0.1:3"]}), ("allreduce", {})])
def test_each_graph_counts_the_payloads_its_own_build_made(mode, servers):
    """The digits MLP's four variables (64 x 128, 128, 128 x 10, 10: 9610 floats) cost 8bit n + 4 bytes each,
    8196 + 132 + 1284 + 14 = 9626 a push, against 4 x 9610 = 38440 as float32, in the first graph built and in a
    second from the same Settings: each build counts the payloads its own hooks made (compression.Compression,
    fresh for every graph), and the Settings' own stays empty."""
    cluster = cluster_lib.parse({"cluster": {**servers, "worker": ["127.0.0.1:1", "127.0.0.1:2"]}}, "test")
    fields = {**FLAGS, "collective_group": 1, "gradient_compression": "8bit"}
    settings = worker_settings(mode, cluster, 0, None, fields)
    for _ in range(2):
        with tf.Graph().as_default():
            counters = build_graph(MLP, DIGITS, settings).counters
            counted = [tf.get_static_value(counters[name]) for name in ("bytes_per_push", "float_bytes_per_push")]
        assert counted == [9626, 38440]
    assert settings.hooks.wrap == (compression.HOOKS,) and compression.HOOKS.payloads == []


@pytest.mark.parametrize("name", ["16bit", "topk:0", "topk:x", "qsgd:0", "qsgd:128", "qsgd:4:0", "qsgd:4:x"])
def test_unknown_codecs_are_refused(name):
    with pytest.raises(ConfigError, match=f"--gradient_compression={name}: expected none, 8bit, 1bit, topk:K, qsgd:S"):
        codecs.parse(name)


def vector_recipe(gradient):
    """One parameter vector w (from 0) whose gradient is `gradient` whatever w and the data are."""

    def model_fn(features, num_classes):
        return features - tf.get_variable("w", [len(gradient)], initializer=tf.zeros_initializer())

    def loss_fn(labels, residuals):
        return tf.reduce_mean(tf.reduce_sum(-tf.constant(gradient) * residuals, axis=1))

    return Recipe(name="vector", model_fn=model_fn, datasets={}, loss_fn=loss_fn)


@pytest.mark.inprocess
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_compressed_step_applies_the_decoded_gradient(tmp_path, mode):
    """Two workers, each with gradient V, learning rate 1, one step. Sync applies the mean of the two
    decoded gradients, -[0.299213, -1, 0.251969]; async applies both pushes: twice that. A push sends
    3 int8 and a float32 scale, 7 bytes, where float32 would send 12."""
    x = np.zeros([2, 3], np.float32)
    data = Dataset(x, np.zeros(2, np.int64), x, np.zeros(2, np.int64), num_classes=1, name="vectors")
    flags = {"gradient_compression": "8bit", "learning_rate": 1.0, "train_steps": 1}
    result = train(vector_recipe(V), data, tmp_path, mode, num_workers=2, **flags)
    pushes = 1 if mode == "sync" else 2
    np.testing.assert_allclose(result["params"]["model/w:0"], -pushes * np.array([0.299213, -1, 0.251969]), atol=1e-6)
    assert (result["summary"]["bytes_per_push"], result["summary"]["float_bytes_per_push"]) == (7, 12)


@pytest.mark.inprocess
def test_compressed_ordered_sync_repeats_bitwise_and_differs_from_float(tmp_path):
    """With QSGD's random roundings too: they are drawn from the run's seed, the worker and the step."""
    flags = {"global_batch_size": 120, "train_steps": 10, "learning_rate": 0.1, "log_every": 5}
    qsgd = {"gradient_compression": "qsgd:4", "error_feedback": False}

    def sha(name, **more):
        return train(MLP, DIGITS, tmp_path / name, "sync", **flags, **more)["summary"]["params_sha256"]

    first, second = sha("first", **qsgd), sha("second", **qsgd)
    assert first == second != sha("float")
