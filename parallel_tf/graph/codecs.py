"""Gradient codecs: what a worker sends in place of a float32 gradient, and how it is read back.

    8bit   q = round(127 v / max|v|) as int8, and max|v|        n + 4 bytes    linear 8-bit quantisation
    1bit   the signs of v, 8 to a byte, and mean|v|             ceil(n/8) + 4  scaled sign
    topk:K the K largest |v| as float32 and their int32 indices 8K bytes       top-k sparsification
    qsgd:S ‖v‖₂, and each |v_i| as one of S+1 levels 0, ‖v‖/S, n + 4 bytes    unbiased stochastic
           .., ‖v‖ rounded up or down at random, with its sign,                 quantisation
           as int8 (S ≤ 127)

Each variable is encoded on its own: top-k takes K of each (all of one with K or fewer). With the
error feedback of techniques/compression.py, these are the methods of:
    8bit   the linear 8-bit approximation that Dettmers, "8-Bit Approximations for Parallelism in Deep
           Learning", ICLR 2016, compares his dynamic data type against (not that data type);
    1bit   EF-SignSGD: Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other
           Gradient Compression Schemes", ICML 2019: one scale, mean|v|, per tensor. Not Seide et al.'s
           1-bit SGD (Interspeech 2014), which decodes each column to two values, the means of its
           positive and its negative entries;
    topk:K Aji, Heafield, "Sparse Communication for Distributed Gradient Descent", EMNLP 2017 (the
           largest K by magnitude, the rest kept in the residual). Not Strom (Interspeech 2015), who
           sends every entry above a fixed threshold τ.
and, meant without error feedback (--noerror_feedback), since it is unbiased on its own:
    qsgd:S QSGD: Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via
           Gradient Quantization and Encoding", NeurIPS 2017, its quantiser Q_s: |v_i|·S/‖v‖ lies
           between levels l and l+1 and is sent as l+1 with probability |v_i|·S/‖v‖ − l, so the
           decoded gradient's expectation is v. One norm per variable (the paper's buckets are one
           per tensor here), sent as int8 levels, not the paper's Elias code. S = 1 is TernGrad's
           ternary {−1, 0, 1} (Wen et al., NeurIPS 2017) with the l2 norm in place of its max|v|.

`encode(v, seed)` runs on the worker and gives the payload, the only tensors that cross to the
parameter server; `decode` runs there. 8bit, 1bit and topk are deterministic and ignore the seed;
qsgd draws its random roundings from it (an int64 pair, a function of the run's seed, the worker,
the variable and the global step), so a repeat, and a resumed run, draws the same ones.
"""

import dataclasses

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

NAMES = ("8bit", "1bit", "topk:K", "qsgd:S")
MAX_LEVELS = 127  # a signed level fits in an int8


@dataclasses.dataclass(frozen=True)
class EightBit:
    def encode(self, v, seed):
        scale = tf.reduce_max(tf.abs(v))
        safe = tf.where(scale > 0, scale, tf.ones_like(scale))
        return [tf.cast(tf.round(127.0 * v / safe), tf.int8), scale]

    def decode(self, payload, size):
        q, scale = payload
        return tf.cast(q, tf.float32) * (scale / 127.0)

    def payload_bytes(self, size):
        return size + 4


@dataclasses.dataclass(frozen=True)
class OneBit:
    def encode(self, v, seed):
        size = v.shape.num_elements()
        bits = tf.cast(v >= 0, tf.uint8)
        padded = tf.pad(bits, [[0, -size % 8]])
        weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.uint8)
        packed = tf.reduce_sum(tf.reshape(padded, [-1, 8]) * weights, axis=1)  # < 256: no overflow
        return [packed, tf.reduce_mean(tf.abs(v))]

    def decode(self, payload, size):
        packed, scale = payload
        weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.uint8)
        bits = tf.bitwise.bitwise_and(tf.expand_dims(packed, 1), weights) > 0
        signs = tf.where(tf.reshape(bits, [-1])[:size], tf.ones([size]), -tf.ones([size]))
        return signs * scale

    def payload_bytes(self, size):
        return -(-size // 8) + 4


@dataclasses.dataclass(frozen=True)
class TopK:
    k: int

    def encode(self, v, seed):
        k = min(self.k, v.shape.num_elements())
        _, indices = tf.nn.top_k(tf.abs(v), k=k, sorted=True)  # ties: the lower index first
        return [tf.gather(v, indices), indices]

    def decode(self, payload, size):
        values, indices = payload
        return tf.scatter_nd(tf.expand_dims(indices, 1), values, [size])

    def payload_bytes(self, size):
        return 8 * min(self.k, size)


@dataclasses.dataclass(frozen=True)
class QSGD:
    levels: int

    def encode(self, v, seed):
        return self.encode_with(v, tf.random.stateless_uniform(tf.shape(v), seed))

    def encode_with(self, v, uniform):
        """The payload with `uniform` (a draw from [0, 1) per element) deciding each rounding: the level
        floor(|v|·S/‖v‖ + u) is l+1 exactly when u ≥ 1 − (|v|·S/‖v‖ − l)."""
        norm = tf.norm(v)
        safe = tf.where(norm > 0, norm, tf.ones_like(norm))
        level = tf.minimum(tf.floor(tf.abs(v) * (self.levels / safe) + uniform), self.levels)
        return [tf.cast(tf.sign(v) * level, tf.int8), norm]

    def decode(self, payload, size):
        levels, norm = payload
        return tf.cast(levels, tf.float32) * (norm / self.levels)

    def payload_bytes(self, size):
        return size + 4


def parse(name):
    """The codec --gradient_compression names ('none' -> None); ConfigError for anything else."""
    if name == "none":
        return None
    if name == "8bit":
        return EightBit()
    if name == "1bit":
        return OneBit()
    if name.startswith("topk:") and name[5:].isdigit() and int(name[5:]) > 0:
        return TopK(int(name[5:]))
    if name.startswith("qsgd:") and name[5:].isdigit() and 0 < int(name[5:]) <= MAX_LEVELS:
        return QSGD(int(name[5:]))
    raise ConfigError(
        f"--gradient_compression={name}: expected none, {', '.join(NAMES)} (K a positive integer, "
        f"1 <= S <= {MAX_LEVELS})"
    )
