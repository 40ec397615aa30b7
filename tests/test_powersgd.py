"""PowerSGD (training/techniques/powersgd.py, --powersgd_rank): one power iteration worked out by hand on a 2x2
matrix, its factors in a float16 transport and in buckets worked out by hand, which matrices go as factors, and
on in-process all-reduce clusters: bitwise repeats, the bytes of the factors, the plain all-reduce before
--powersgd_start_step, and a rank that compresses nothing refused."""

import numpy as np
import pytest
from inprocess import train
from models import DIGITS, FLAGS, MLP

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.collectives import Collectives, Ring
from parallel_tf.training.techniques import powersgd

pytestmark = pytest.mark.inprocess


def test_one_power_iteration_by_hand():
    """M = [[3, 0], [0, 1]], Q = [1, 1]ᵀ/√2, one worker: P = M Q = [3, 1]ᵀ/√2, made unit: [3, 1]ᵀ/√10;
    Q ← Mᵀ P = [9, 1]ᵀ/√10; the gradient applied P Qᵀ = [[27, 3], [9, 1]]/10; the error M − P Qᵀ =
    [[3, −3], [−9, 9]]/10. The next step adds that error to its gradient: from G = 0 it starts at M − P Qᵀ."""
    with tf.Graph().as_default():
        w = tf.get_variable("w", [2, 2])
        # rank-1 factors of a 2x2 matrix hold its 4 floats: below min_compression 1, so it goes as factors
        low_rank = powersgd.LowRank([w], rank=1, min_compression=0.5, seed=0)
        gradient = tf.placeholder(tf.float32, [2, 2])
        (approximation,) = low_rank.means([gradient], Ring(Collectives(1, 0, group=1, on_gpu=False)))
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            low_rank.qs[0].load(np.array([[1.0], [1.0]]) / np.sqrt(2), sess)
            applied = sess.run(approximation, {gradient: [[3.0, 0.0], [0.0, 1.0]]})
            np.testing.assert_allclose(applied, [[2.7, 0.3], [0.9, 0.1]], rtol=1e-6)
            np.testing.assert_allclose(sess.run(low_rank.qs[0]), np.array([[9.0], [1.0]]) / np.sqrt(10), rtol=1e-6)
            np.testing.assert_allclose(sess.run(low_rank.errors[0]), [[0.3, -0.3], [-0.9, 0.9]], atol=1e-6)
            # Q is now the top singular vector of M + e = [[3.3, -0.3], [-0.9, 0.9]]'s power iteration
            second = sess.run(approximation, {gradient: np.zeros([2, 2])})
            error = np.array([[0.3, -0.3], [-0.9, 0.9]])
            q = np.array([9.0, 1.0]) / np.sqrt(10)
            p = error @ q / np.linalg.norm(error @ q)
            np.testing.assert_allclose(second, np.outer(p, error.T @ p), rtol=1e-5)


class TwoAlike:
    """The collectives of two workers that hold the same tensors: every sum is x + x."""

    num_workers, task_index = 2, 0

    def sum(self, tensor):
        return tensor + tensor


def _approximated(matrices, q, ring):
    """(each matrix's rank-1 approximation by one power iteration from `q` over `ring`, its error after)."""
    with tf.Graph().as_default():
        variables = [tf.get_variable(f"w{i}", [2, 2]) for i in range(len(matrices))]
        low_rank = powersgd.LowRank(variables, rank=1, min_compression=0.5, seed=0)
        approximations = low_rank.means([tf.constant(m, tf.float32) for m in matrices], ring)
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            for factor in low_rank.qs:
                factor.load(q, sess)
            return sess.run(approximations), sess.run(low_rank.errors)


def test_a_float16_transport_rounds_each_worker_s_share_of_p_and_of_q():
    """M = [[4098, 0], [0, 1]], Q = [1, 0]ᵀ, two workers alike. P = M Q = [4098, 0]ᵀ: each worker's share,
    4098 / 2 = 2049, lies between float16's 2048 and 2050 (its spacing there is 2) and rounds to even, 2048;
    the two shares add up to a mean of 4096. Made unit, P = [1, 0]ᵀ; Q = Mᵀ P = [4098, 0]ᵀ rounds the same
    way to 4096. So P Qᵀ = [[4096, 0], [0, 0]] is applied and the error keeps M − P Qᵀ = [[2, 0], [0, 1]],
    where float32 applies 4098 and keeps [[0, 0], [0, 1]]."""
    m, q = [[4098.0, 0.0], [0.0, 1.0]], [[1.0], [0.0]]
    (half,), (half_error,) = _approximated([m], q, Ring(TwoAlike(), "float16"))
    np.testing.assert_array_equal(half, [[4096.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(half_error, [[2.0, 0.0], [0.0, 1.0]])
    (whole,), (whole_error,) = _approximated([m], q, Ring(TwoAlike()))
    np.testing.assert_array_equal(whole, [[4098.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(whole_error, [[0.0, 0.0], [0.0, 1.0]])


def test_buckets_send_each_factor_in_a_collective_of_its_own_and_change_no_bit():
    """Two 2x2 matrices, buckets too small for more than one factor: P₁ and P₂ go in a collective each, then
    Q₁ and Q₂, 4 in all where one bucket takes 2 (all the Ps, then all the Qs). With two workers alike each
    mean is (x + x) / 2 = x, in whichever bucket: M₁ = [[3, 0], [0, 1]] from Q = [1, 1]ᵀ/√2 gives the
    [[2.7, 0.3], [0.9, 0.1]] worked out above, and M₂ = 2·M₁ twice that, both ways."""
    m1 = np.array([[3.0, 0.0], [0.0, 1.0]])
    q = np.array([[1.0], [1.0]]) / np.sqrt(2)
    bucketed, one = Ring(TwoAlike(), bucket_mb=1e-9), Ring(TwoAlike())
    in_buckets, _ = _approximated([m1, 2 * m1], q, bucketed)
    in_one, _ = _approximated([m1, 2 * m1], q, one)
    assert (bucketed.summed_buckets, one.summed_buckets) == (4, 2)  # the Ps' buckets, then the Qs'
    np.testing.assert_array_equal(in_buckets, in_one)
    np.testing.assert_allclose(in_buckets, [[[2.7, 0.3], [0.9, 0.1]], [[5.4, 0.6], [1.8, 0.2]]], rtol=1e-6)


@pytest.mark.parametrize(
    "shape, rank, least, compressed",
    [
        ([64, 128], 4, 2, True),  # (64 + 128)·4·2 = 1536 < 8192
        ([128, 10], 4, 2, True),  # (128 + 10)·4·2 = 1104 < 1280
        ([128, 10], 5, 2, False),  # 1380 > 1280
        ([16, 16], 4, 2, False),  # (16 + 16)·4·2 = 256, not below 256: DDP's test is strict
        ([3, 3, 3, 32], 4, 2, True),  # a conv kernel as [27, 32]: (27 + 32)·4·2 = 472 < 864
        ([128], 1, 1, False),  # a vector goes whole
    ],
)
def test_only_matrices_the_factors_shrink_enough_are_compressed(shape, rank, least, compressed):
    assert powersgd.compressible(shape, rank, least) == compressed


RANK_2 = {**FLAGS, "powersgd_rank": 2}


def test_two_workers_repeat_bitwise_and_send_the_factors(tmp_path):
    """The MLP at rank 2: hidden/w [64, 128] and logits/w [128, 10] go as factors: P and Q are
    (64 + 128)·2 + (128 + 10)·2 = 660 floats; the biases (138 floats) and the 2 losses go whole. With two
    workers the ring sends (N−1)/N of a vector twice: each vector once, (660 + 140)·4 = 3200 bytes."""
    runs = [train(MLP, DIGITS, tmp_path / f"r{i}", "allreduce", **RANK_2) for i in range(2)]
    summary = runs[0]["summary"]
    assert summary["params_sha256"] == runs[1]["summary"]["params_sha256"]
    assert summary["powersgd_matrices"] == 2
    assert summary["bytes_sent_per_step"] == summary["bytes_received_per_step"] == 3200
    assert summary["declared"]["powersgd"]["powersgd_rank"] == 2
    assert summary["eval_accuracy"] > 0.7  # it trains as the plain all-reduce does (0.78 after these 30 steps)


def test_before_the_start_step_the_plain_all_reduce_runs(tmp_path):
    """With --powersgd_start_step past the last step, every step is the plain all-reduce's: its bits."""
    started_late = train(MLP, DIGITS, tmp_path / "late", "allreduce", **RANK_2, powersgd_start_step=1000)
    plain = train(MLP, DIGITS, tmp_path / "plain", "allreduce", **FLAGS)
    assert started_late["summary"]["params_sha256"] == plain["summary"]["params_sha256"]
    assert started_late["summary"]["bytes_sent_per_step"] == plain["summary"]["bytes_sent_per_step"]


def test_a_rank_that_compresses_no_matrix_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"--powersgd_rank=100 compresses none of the model's matrices"):
        train(MLP, DIGITS, tmp_path / "r", "allreduce", num_workers=1, **{**FLAGS, "powersgd_rank": 100})
