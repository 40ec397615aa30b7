"""Gradient compression with error feedback, sync (ordered) and async modes:
--gradient_compression=8bit|1bit|topk:K (codecs.py: Dettmers 2015; Seide et al., "1-bit SGD", 2014;
Strom, "Scalable distributed DNN training using commodity GPU cloud computing", 2015).

What a worker sends to the parameter servers (its gradient in sync mode, its summed gradients at an
async push) is encoded on the worker and decoded on the parameter server that holds the variable,
so only the payload crosses. With --error_feedback (on), what the encoding lost is kept in a
residual on the worker and added to the next gradient: v = g + r; q = C(v); r <- v - D(q); send q.
Nothing is lost, only delayed: the updates applied plus the residual sum to the gradients.
Encoding and decoding are deterministic, so ordered sync still repeats bitwise; strict
determinism across worker counts does not hold (each worker's residual depends on its shard).
"""

import dataclasses

from absl import flags

from parallel_tf import codecs
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import LOCAL

MODES = ("sync", "async")
FLAGS = ("gradient_compression", "error_feedback")
IMPLIES = {"aggregation": "ordered", "strict_determinism": False}
PAYLOADS = "gradient_payloads"  # graph collection: the tensors that cross to the parameter servers


def define_flags(flag_values=flags.FLAGS):
    flags.DEFINE_string(
        "gradient_compression",
        "none",
        "sync (ordered) and async: send gradients as 8bit (int8 and a scale), 1bit (signs and a scale) or "
        "topk:K (the K largest, with indices), decoded on the parameter server.",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "error_feedback",
        True,
        "With --gradient_compression: keep what the encoding lost on the worker and add it to the next "
        "gradient (--noerror_feedback: drop it).",
        flag_values=flag_values,
    )


def enabled(options, cluster):
    return options["gradient_compression"] != "none"


def check(options, cluster):
    codecs.parse(options["gradient_compression"])
    if not enabled(options, cluster):
        return
    if options.get("aggregation") == "accumulator":
        raise ConfigError(
            "--gradient_compression needs --aggregation=ordered: SyncReplicasOptimizer's accumulators "
            "take float gradients"
        )
    if options.get("strict_determinism"):
        raise ConfigError(
            "--gradient_compression does not go with --strict_determinism: each worker's residual depends "
            "on its shard, so different worker counts cannot train the same bits"
        )


def transmit(options, tensors, destinations):
    """`tensors` (on this worker) as the parameter servers decode them, each next to its variable in
    `destinations`; the payloads are added to the PAYLOADS collection."""
    codec = codecs.parse(options["gradient_compression"])
    return [_transmit_one(codec, options["error_feedback"], t, d) for t, d in zip(tensors, destinations, strict=True)]


def _transmit_one(codec, error_feedback, tensor, destination):
    size = tensor.shape.num_elements()
    with tf.device(tensor.device):  # on the worker
        v = tf.reshape(tensor, [-1])
        if error_feedback:
            residual = tf.Variable(tf.zeros([size]), trainable=False, collections=LOCAL, name="residual")
            v = v + residual
        payload = codec.encode(v)
        kept = [residual.assign(v - codec.decode(payload, size))] if error_feedback else []
    for part in payload:
        tf.add_to_collection(PAYLOADS, part)
    with tf.colocate_with(destination), tf.control_dependencies(kept):  # on its parameter server
        return tf.reshape(codec.decode(payload, size), tensor.shape)


def build(build_mode, recipe, dataset, settings, cluster, task_index):
    """Counts what a push sends, from the payload tensors' shapes, beside what float32 would; in sync mode,
    which has no local variables of its own, initialises the residuals."""
    graph = build_mode(recipe, dataset, settings, cluster, task_index)
    if graph.local_init_op is None:
        globals_ready = tf.report_uninitialized_variables(tf.global_variables())
        graph = dataclasses.replace(
            graph, local_init_op=tf.local_variables_initializer(), ready_for_local_init_op=globals_ready
        )
    payloads = tf.get_collection(PAYLOADS)
    sent = sum(t.shape.num_elements() * t.dtype.size for t in payloads)
    floats = sum(v.shape.num_elements() * 4 for v in tf.trainable_variables())
    counters = dict(graph.counters, bytes_per_push=tf.constant(sent, tf.int64))
    counters["float_bytes_per_push"] = tf.constant(floats, tf.int64)
    return dataclasses.replace(graph, counters=counters)
