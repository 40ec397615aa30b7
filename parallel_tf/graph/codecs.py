"""Gradient codecs: what a worker sends in place of a float32 gradient, and how it is read back.

    8bit       q = round(127 v / max|v|) as int8, and max|v|     n + 4 bytes        linear 8-bit quantisation
    1bit       the signs of v, 8 to a byte, and mean|v|          ceil(n/8) + 4      scaled sign
    topk:K     the K largest |v| as float32 and their int32      8K bytes           top-k sparsification
               indices
    qsgd:S[:B] per bucket of B elements (default 128), its ‖·‖₂,  n + 4·ceil(n/B)    unbiased stochastic
               and each |v_i| as one of S+1 levels 0, ‖·‖/S,                        quantisation
               .., ‖·‖ rounded up or down at random, with its
               sign, as int8 (S ≤ 127)
    terngrad   max|v|, and each v_i as sign(v_i) with              ceil(n/4) + 4      stochastic ternary
               probability |v_i|/max|v|, else 0: {−1, 0, 1},
               2 bits each, 4 to a byte

Each variable is encoded on its own: top-k takes K of each (all of one with K or fewer). With the
error feedback of techniques/compression.py (on by default for these), they are the methods of:
    8bit   the linear 8-bit approximation that Dettmers, "8-Bit Approximations for Parallelism in Deep
           Learning", ICLR 2016, compares his dynamic data type against (not that data type);
    1bit   EF-SignSGD: Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other
           Gradient Compression Schemes", ICML 2019: one scale, mean|v|, per tensor. Not Seide et al.'s
           1-bit SGD (Interspeech 2014), which decodes each column to two values, the means of its
           positive and its negative entries;
    topk:K Aji, Heafield, "Sparse Communication for Distributed Gradient Descent", EMNLP 2017 (the
           largest K by magnitude, the rest kept in the residual). Not Strom (Interspeech 2015), who
           sends every entry above a fixed threshold τ.
and, unbiased on their own, without error feedback unless it is asked for (then EF-QSGD, EF-TernGrad):
    qsgd:S:B  QSGD: Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via
           Gradient Quantization and Encoding", NeurIPS 2017, its quantiser Q_s on buckets of B elements
           (its experiments use buckets of 128 to 8192; 128 is GRACE's QSGD default): |v_i|·S/‖bucket‖
           lies between levels l and l+1 and is sent as l+1 with probability |v_i|·S/‖bucket‖ − l, so the
           decoded gradient's expectation is v. Levels are sent as int8, not the paper's Elias code.
           qsgd:1 is QSGD's ternary case, scaled by the l2 norm: not TernGrad, which scales by max|v|;
    terngrad  TernGrad: Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad: Ternary Gradients to Reduce
           Communication in Distributed Deep Learning", NeurIPS 2017: s = max|v| per layer, each element
           s·sign(v_i)·b_i with b_i ~ Bernoulli(|v_i|/s), 2 bits an element (its layer-wise gradient
           clipping is not applied; --clip_norm clips the global norm instead).

`encode(v, seed)` runs on the worker and gives the payload, the only tensors that cross to the
parameter server; `decode` runs there. 8bit, 1bit and topk are deterministic and ignore the seed;
qsgd and terngrad draw their random roundings from it (an int64 pair, a function of the run's seed,
the worker, the variable and the global step), so a repeat, and a resumed run, draws the same ones.
"""

from __future__ import annotations  # the annotations name TensorFlow's types, never imported for them

import dataclasses

from parallel_tf.backports import Protocol
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import exact_math, exact_ops
from parallel_tf.graph.model import LOCAL
from parallel_tf.graph.worker_state import keep

MAX_LEVELS = 127  # a signed level fits in an int8
QSGD_BUCKET = 128  # elements that share one norm, by default


class Codec(Protocol):
    """What every codec is: its paper's name, whether error feedback is on by default (off for the unbiased ones),
    and the three things a gradient's crossing needs."""

    name: str
    error_feedback_by_default: bool

    def encode(self, v: tf.Tensor, seed: tf.Tensor) -> list:
        """The payload of the flat gradient `v`: the only tensors that cross to the parameter server."""

    def decode(self, payload: list, size: int) -> tf.Tensor:
        """The flat gradient of `size` elements that `payload` stands for."""

    def payload_bytes(self, size: int) -> int:
        """The bytes of the payload of a gradient of `size` elements."""


@dataclasses.dataclass(frozen=True)
class EightBit:
    name = "8-bit"
    error_feedback_by_default = True

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
    name = "SignSGD"
    error_feedback_by_default = True

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
    name = "top-k"
    error_feedback_by_default = True

    def encode(self, v, seed):
        k = min(self.k, v.shape.num_elements())
        _, indices = tf.nn.top_k(tf.abs(v), k=k, sorted=True)  # ties: the lower index first
        return [tf.gather(v, indices), indices]

    def decode(self, payload, size):
        values, indices = payload
        return tf.scatter_nd(tf.expand_dims(indices, 1), values, [size])

    def payload_bytes(self, size):
        return 8 * min(self.k, size)


def stochastic_levels(magnitudes, scale, levels, uniform):
    """Each |v|·S/scale rounded down or up at random to a whole level (up with probability its fraction), by
    `uniform` (a draw from [0, 1) per element): floor(x + u) is l+1 exactly when u ≥ 1 − (x − l)."""
    safe = tf.where(scale > 0, scale, tf.ones_like(scale))
    return tf.minimum(tf.floor(magnitudes * exact_ops.quotient(float(levels), safe) + uniform), levels)


class _Stochastic:
    """A codec whose roundings are drawn: from `seed`, one uniform draw per element."""

    error_feedback_by_default = False  # unbiased: its paper uses none

    def encode(self, v, seed):
        return self.encode_with(v, tf.random.stateless_uniform(tf.shape(v), seed))

    def encode_with(self, v, uniform):
        """The payload of `v`, with `uniform` (one draw an element, in [0, 1)) deciding each rounding: each
        codec's own."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class QSGD(_Stochastic):
    levels: int
    bucket: int = QSGD_BUCKET
    name = "QSGD"

    def encode_with(self, v, uniform):
        """The payload with `uniform` deciding each rounding: the levels, and each bucket's l2 norm."""
        size = v.shape.num_elements()
        buckets, draws = (self._buckets(t, size) for t in (v, uniform))  # [⌈n/B⌉, B], zero-padded
        norms = exact_math.norm(buckets, axis=1)
        level = stochastic_levels(tf.abs(buckets), tf.expand_dims(norms, 1), self.levels, draws)
        return [tf.cast(tf.reshape(tf.sign(buckets) * level, [-1])[:size], tf.int8), norms]

    def decode(self, payload, size):
        levels, norms = payload
        return tf.cast(levels, tf.float32) * tf.gather(norms / self.levels, tf.range(size) // self.bucket)

    def payload_bytes(self, size):
        return size + 4 * -(-size // self.bucket)

    def _buckets(self, t, size):
        return tf.reshape(tf.pad(t, [[0, -size % self.bucket]]), [-1, self.bucket])


TERNARY_WEIGHTS = (64, 16, 4, 1)  # four 2-bit codes (level + 1: 0, 1, 2) to a byte


@dataclasses.dataclass(frozen=True)
class TernGrad(_Stochastic):
    name = "TernGrad"

    def encode_with(self, v, uniform):
        """The payload with `uniform` deciding each element: max|v|, and the ternary levels packed."""
        size = v.shape.num_elements()
        scale = tf.reduce_max(tf.abs(v))
        codes = tf.cast(tf.sign(v) * stochastic_levels(tf.abs(v), scale, 1, uniform) + 1, tf.uint8)
        padded = tf.reshape(tf.pad(codes, [[0, -size % 4]]), [-1, 4])
        return [tf.reduce_sum(padded * tf.constant(TERNARY_WEIGHTS, tf.uint8), axis=1), scale]  # ≤ 170: no overflow

    def decode(self, payload, size):
        packed, scale = payload
        shifts = tf.constant([6, 4, 2, 0], tf.uint8)
        codes = tf.bitwise.bitwise_and(tf.bitwise.right_shift(tf.expand_dims(packed, 1), shifts), 3)
        return (tf.cast(tf.reshape(codes, [-1])[:size], tf.float32) - 1.0) * scale

    def payload_bytes(self, size):
        return -(-size // 4) + 4


@dataclasses.dataclass(frozen=True)
class Argument:
    """An integer after a codec's name (`topk:K`): its letter in the syntax, its range, and its default (None:
    it must be given)."""

    letter: str
    low: int = 1
    high: int | None = None
    default: int | None = None

    def value(self, text):
        """The argument `text` gives, or None where it is no integer in range."""
        if not text.isdigit() or int(text) < self.low or (self.high is not None and int(text) > self.high):
            return None
        return int(text)


# --gradient_compression's codecs: name, the class, and the integers after the name its constructor takes
CODECS: dict[str, tuple[type[Codec], tuple[Argument, ...]]] = {
    "8bit": (EightBit, ()),
    "1bit": (OneBit, ()),
    "topk": (TopK, (Argument("K"),)),
    "qsgd": (QSGD, (Argument("S", high=MAX_LEVELS), Argument("B", default=QSGD_BUCKET))),
    "terngrad": (TernGrad, ()),
}


def _syntax(name, arguments):
    """'qsgd:S[:B]': the name, each argument's letter after a colon, an optional one in brackets."""
    return name + "".join(f"[:{a.letter}]" if a.default is not None else f":{a.letter}" for a in arguments)


NAMES = tuple(_syntax(name, arguments) for name, (_, arguments) in CODECS.items())


def parse(name: str) -> Codec | None:
    """The codec --gradient_compression names ('none' -> None); ConfigError for anything else."""
    if name == "none":
        return None
    head, *given = name.split(":")
    codec, arguments = CODECS.get(head, (None, ()))
    required = sum(argument.default is None for argument in arguments)
    if codec and required <= len(given) <= len(arguments):
        values = [argument.value(text) for argument, text in zip(arguments, given)]
        if None not in values:
            return codec(*values, *(argument.default for argument in arguments[len(given) :]))
    raise ConfigError(
        f"--gradient_compression={name}: expected none, {', '.join(NAMES)} (K and B positive integers, "
        f"1 <= S <= {MAX_LEVELS})"
    )


def seeds(step, stream, count):
    """The seeds of a random codec's draws for tensors 0..count-1 at global step `step`: (step, stream·2¹⁶ + i),
    so a repeat, and a resumed run, draws the same ones."""
    return [tf.stack([step, tf.constant(stream * (1 << 16) + i, tf.int64)]) for i in range(count)]


def encoded(codec, tensor, seed, feedback):
    """(the payload of `tensor`, flattened, and the ops that keep what the encoding lost). With error feedback a
    residual, a local variable (each worker its own, in the checkpoint: worker_state.py), is added first and
    keeps v − D(C(v)) for the next step."""
    v = tf.reshape(tensor, [-1])
    if not feedback:
        return codec.encode(v, seed), []
    size = v.shape.num_elements()
    with tf.init_scope():  # made once, outside any loop of steps; each step reads it afresh
        residual = keep(tf.Variable(tf.zeros([size]), trainable=False, collections=LOCAL, name="residual"))
    v = v + residual.read_value()
    payload = codec.encode(v, seed)
    return payload, [residual.assign(v - codec.decode(payload, size))]
