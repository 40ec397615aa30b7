"""Gradient compression, with error feedback where its paper has it, sync (ordered) and async modes:
--gradient_compression=8bit|1bit|topk:K|qsgd:S[:B]|terngrad (codecs.py says which paper each codec is).
(All-reduce gathers every worker's codes instead, by this module's reduce hook: graph/gathered_codes.py;
its `wrap` counts the payload as it counts a push's.)

What a worker sends to the parameter servers (its gradient in sync mode, its summed gradients at an
async push) is encoded on the worker, whatever else the run does to it afterwards (delay
compensation works on the decoded gradient, on the parameter server), and decoded on the parameter
server that holds the variable, so only the payload crosses. With error feedback, what the encoding
lost is kept in a residual on the worker (each worker its own) and added to the next gradient:
v = g + r; q = C(v); r <- v - D(q); send q. Nothing is lost, only delayed: the updates applied plus
the residual sum to the gradients. It is on by default for the biased codecs (8bit, 1bit, topk), whose
papers use it, and off for the unbiased ones (qsgd, terngrad), whose papers do not: --error_feedback
or --noerror_feedback says otherwise, and summary.json names what ran (QSGD, or EF-QSGD).
Encoding and decoding are deterministic (QSGD's draws are a function of the run's seed, the worker,
the variable and the step), so ordered sync still repeats bitwise; strict
determinism across worker counts does not hold (each worker's residual depends on its shard).
"""

from __future__ import annotations

from parallel_tf.backports import zip_strict
from parallel_tf.cli import counted
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import codecs, gathered_codes
from parallel_tf.graph.collectives import Reducing, Reduction
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.seams import OfOneGraph


def _codec(name: str) -> codecs.Codec:
    """The codec --gradient_compression=`name` names, in a run that compresses (at "none" the technique is off)."""
    codec = codecs.parse(name)
    assert codec is not None, name
    return codec


def as_the_paper_does(values):
    """Whether a run that does not say keeps a residual: as its codec's paper does (settled by `automatic`, so
    --error_feedback's value is the run's from then on)."""
    return _codec(values["gradient_compression"]).error_feedback_by_default


def check_shapes(values, cluster, shapes):
    """On all-reduce, codes are gathered whole from every other worker (graph/gathered_codes.py): refused where
    that sends no fewer bytes than the float all-reduce would."""
    if values["mode"] != "allreduce":
        return
    name = values["gradient_compression"]
    worth_it, gathered, ring = gathered_codes.pays(_codec(name), shapes, cluster.num_workers)
    if not worth_it:
        raise ConfigError(
            f"--gradient_compression={name} over all-reduce gathers {gathered} bytes a step from the other "
            f"{counted(cluster.num_workers - 1, 'worker')}, no fewer than the float all-reduce's {ring:.0f}: use fewer "
            "workers or leave it out"
        )


def record(settings):
    """What summary.json says ran: the codec, whether error feedback was on, the algorithm's name, and its
    buckets where it has them (QSGD)."""
    codec, feedback = _codec(settings.options.gradient_compression), settings.options.error_feedback
    return {
        "gradient_compression": settings.options.gradient_compression,
        "error_feedback": feedback,
        "algorithm": f"EF-{codec.name}" if feedback and not codec.error_feedback_by_default else codec.name,
        **({"bucket": codec.bucket} if isinstance(codec, codecs.QSGD) else {}),
    }


class Options(Flags):
    gradient_compression: str = flag(
        "none",
        "sync (ordered), async and allreduce (codes gathered): send gradients as 8bit (int8 and a scale), "
        "1bit (signs and a scale), topk:K (the K largest, with indices), qsgd:S[:B] (QSGD's unbiased random "
        "rounding to S levels, a norm per bucket of B, default 128) or terngrad (TernGrad's ternary levels), "
        "decoded where they arrive.",
        parse=codecs.parse,
    )
    error_feedback: bool | None = flag(
        None,
        "With --gradient_compression: keep what the encoding lost on the worker and add it to the next "
        "gradient (--noerror_feedback: drop it). Default: as the codec's paper does: on for 8bit, 1bit and "
        "topk, off for qsgd and terngrad.",
        kind=bool,
    )


TECHNIQUE = Technique(
    name="compression",
    modes=("sync", "async", "allreduce"),
    hooks=("transmit", "wrap", "reduce"),  # all-reduce's reduce gathers the codes
    closes={"ring": "the codes cross in their own types, gathered whole, in one gather per type"},
    requires={
        "aggregation": ("ordered", "SyncReplicasOptimizer's accumulators take float gradients"),
        "strict_determinism": (
            False,
            "each worker's residual and draws depend on its shard and index, so worker counts differ",
        ),
    },
    automatic={"error_feedback": as_the_paper_does},
    record=record,
    worker_state=lambda values: values["error_feedback"],  # each worker's residuals
    whole_variables=True,  # a codec encodes each variable with a scale (a norm, a top-k) of its own
    check_shapes=check_shapes,
    options=Options,
)


class Compression(OfOneGraph):
    """The codec's hooks on one graph, with the payloads its `transmit` or `reduce` made, which `wrap` counts."""

    def __init__(self) -> None:
        self.payloads: list = []  # the tensors that cross: to the parameter servers, or gathered by the other workers

    def transmit(self, settings, tensors, destinations, device, stream):
        """`tensors` as the parameter servers decode them, each next to its variable in `destinations`,
        encoded on `device` (this worker's), where each keeps its residual. A random codec draws for tensor i at
        global step t from seed (t, stream·2¹⁶ + i)."""
        codec, feedback = _codec(settings.options.gradient_compression), settings.options.error_feedback
        with tf.device(device):
            step = tf.train.get_or_create_global_step().read_value()
        seeds = codecs.seeds(step, stream, len(tensors))
        return [
            self._transmit_one(codec, feedback, tensor, destination, seed, device)
            for tensor, destination, seed in zip_strict(tensors, destinations, seeds)
        ]

    def _transmit_one(self, codec, feedback, tensor, destination, seed, device):
        size = tensor.shape.num_elements()
        with tf.device(device):
            payload, kept = codecs.encoded(codec, tensor, seed, feedback)
        self.payloads.extend(payload)
        with tf.colocate_with(destination), tf.control_dependencies(kept):  # on its parameter server
            return tf.reshape(codec.decode(payload, size), tensor.shape)

    def reduce(self, settings, ring, variables):
        """All-reduce's reduce hook: the codes gathered, from step 0."""
        return [GatheredCodes(settings, ring, self.payloads)]

    def wrap(self, settings, graph):
        """Counts what a push sends, from the payload tensors' shapes, beside what float32 would. (Its
        residuals, local variables, are initialised as every local variable is: train_graph.with_join_fields.)"""
        sent = sum(t.shape.num_elements() * t.dtype.size for t in self.payloads)
        floats = sum(v.shape.num_elements() * 4 for v in tf.trainable_variables())
        return graph.counting(
            {"bytes_per_push": tf.constant(sent, tf.int64), "float_bytes_per_push": tf.constant(floats, tf.int64)}
        )


HOOKS = Compression()


class GatheredCodes(Reducing):
    """Every worker's codes gathered and decoded by all, the losses summed in float32; what crosses is added to
    `payloads`, which Compression's `wrap` counts. A random codec draws for variable i at step t from
    (t, stream·2¹⁶ + i), as on the servers."""

    def __init__(self, settings, ring, payloads):
        self.codec, self.feedback = _codec(settings.options.gradient_compression), settings.options.error_feedback
        self.stream, self.ring, self.payloads = settings.random_stream, ring, payloads

    def reduce(self, gradients) -> Reduction:
        seeds = codecs.seeds(tf.train.get_global_step().read_value(), self.stream, len(gradients.whole))
        collectives = self.ring.collectives
        means, sent = gathered_codes.mean_of_codes(gradients.whole, collectives, self.codec, self.feedback, seeds)
        self.payloads.extend(sent)
        return Reduction(means, collectives.sum(self.ring.loss_slots(gradients.loss)))
