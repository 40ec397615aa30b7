"""Gradient compression with error feedback, sync (ordered) and async modes:
--gradient_compression=8bit|1bit|topk:K|qsgd:S (codecs.py says which paper each codec is).

What a worker sends to the parameter servers (its gradient in sync mode, its summed gradients at an
async push) is encoded on the worker, whatever else the run does to it afterwards (delay
compensation works on the decoded gradient, on the parameter server), and decoded on the parameter
server that holds the variable, so only the payload crosses. With --error_feedback (on), what the
encoding lost is kept in a residual on the worker (each worker its own) and added to the next
gradient: v = g + r; q = C(v); r <- v - D(q); send q. Nothing is lost, only delayed: the updates
applied plus the residual sum to the gradients.
Encoding and decoding are deterministic (QSGD's draws are a function of the run's seed, the worker,
the variable and the step), so ordered sync still repeats bitwise; strict
determinism across worker counts does not hold (each worker's residual depends on its shard).
"""

import dataclasses

from absl import flags

from parallel_tf.cli import validate_by_parsing
from parallel_tf.compat import tf
from parallel_tf.graph import codecs
from parallel_tf.graph.model import LOCAL
from parallel_tf.training.techniques.rules import Technique

TECHNIQUE = Technique(
    name="compression",
    flags=("gradient_compression", "error_feedback"),
    modes=("sync", "async"),
    hooks=("transmit", "wrap"),
    requires={
        "aggregation": ("ordered", "SyncReplicasOptimizer's accumulators take float gradients"),
        "strict_determinism": (False, "each worker's residual depends on its shard, so worker counts differ"),
    },
)
PAYLOADS = "gradient_payloads"  # graph collection: the tensors that cross to the parameter servers


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_string(
        "gradient_compression",
        "none",
        "sync (ordered) and async: send gradients as 8bit (int8 and a scale), 1bit (signs and a scale), "
        "topk:K (the K largest, with indices) or qsgd:S (QSGD's unbiased random rounding to S levels; use "
        "with --noerror_feedback for QSGD itself), decoded on the parameter server.",
        flag_values=flag_values,
    )
    validate_by_parsing("gradient_compression", codecs.parse, flag_values)
    flags.DEFINE_bool(
        "error_feedback",
        True,
        "With --gradient_compression: keep what the encoding lost on the worker and add it to the next "
        "gradient (--noerror_feedback: drop it).",
        flag_values=flag_values,
    )


def enabled(values, cluster):
    return values["gradient_compression"] != "none"


def check(values, cluster):
    """Any encoding with any cluster (its flag's validator checks the format)."""


def transmit(options, tensors, destinations, device, stream):
    """`tensors` as the parameter servers decode them, each next to its variable in `destinations`,
    encoded on `device` (this worker's), where each keeps its residual; the payloads are added to the
    PAYLOADS collection. A random codec draws for tensor i at global step t from seed (t, stream·2¹⁶ + i)."""
    codec = codecs.parse(options["gradient_compression"])
    error_feedback = options["error_feedback"]
    with tf.device(device):
        step = tf.train.get_or_create_global_step().read_value()
    seeds = [tf.stack([step, tf.constant(stream * (1 << 16) + i, tf.int64)]) for i in range(len(tensors))]
    return [
        _transmit_one(codec, error_feedback, *sent, device) for sent in zip(tensors, destinations, seeds, strict=True)
    ]


def _transmit_one(codec, error_feedback, tensor, destination, seed, device):
    size = tensor.shape.num_elements()
    with tf.device(device):
        v = tf.reshape(tensor, [-1])
        if error_feedback:
            residual = tf.Variable(tf.zeros([size]), trainable=False, collections=LOCAL, name="residual")
            v = v + residual
        payload = codec.encode(v, seed)
        kept = [residual.assign(v - codec.decode(payload, size))] if error_feedback else []
    for part in payload:
        tf.add_to_collection(PAYLOADS, part)
    with tf.colocate_with(destination), tf.control_dependencies(kept):  # on its parameter server
        return tf.reshape(codec.decode(payload, size), tensor.shape)


def wrap(graph, settings, cluster, task_index):
    """Counts what a push sends, from the payload tensors' shapes, beside what float32 would. (Its
    residuals, local variables, are initialised as every local variable is: train_graph.with_join_fields.)"""
    payloads = tf.get_collection(PAYLOADS)
    sent = sum(t.shape.num_elements() * t.dtype.size for t in payloads)
    floats = sum(v.shape.num_elements() * 4 for v in tf.trainable_variables())
    counters = dict(graph.counters, bytes_per_push=tf.constant(sent, tf.int64))
    counters["float_bytes_per_push"] = tf.constant(floats, tf.int64)
    return dataclasses.replace(graph, counters=counters)
