"""Gradient codecs: what a worker sends in place of a float32 gradient, and how it is read back.

    8bit   q = round(127 v / max|v|) as int8, and max|v|        n + 4 bytes    linear 8-bit quantisation
    1bit   the signs of v, 8 to a byte, and mean|v|             ceil(n/8) + 4  scaled sign
    topk:K the K largest |v| as float32 and their int32 indices 8K bytes       top-k sparsification

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

`encode` runs on the worker and gives the payload, the only tensors that cross to the parameter
server; `decode` runs there. Both are deterministic, so a repeat decodes the same bits.
"""

import dataclasses

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

NAMES = ("8bit", "1bit", "topk:K")


@dataclasses.dataclass(frozen=True)
class EightBit:
    def encode(self, v):
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
    def encode(self, v):
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

    def encode(self, v):
        k = min(self.k, v.shape.num_elements())
        _, indices = tf.nn.top_k(tf.abs(v), k=k, sorted=True)  # ties: the lower index first
        return [tf.gather(v, indices), indices]

    def decode(self, payload, size):
        values, indices = payload
        return tf.scatter_nd(tf.expand_dims(indices, 1), values, [size])

    def payload_bytes(self, size):
        return 8 * min(self.k, size)


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
    raise ConfigError(f"--gradient_compression={name}: expected none, {', '.join(NAMES)} (K a positive integer)")
