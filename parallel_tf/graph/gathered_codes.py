"""The parameter servers' codecs (codecs.py) over all-reduce, as GRACE runs codecs whose codes cannot be
added: every worker encodes its gradients (with its residual, where error feedback is on), the workers
gather every worker's payload (CollectiveGather, in worker order), and each decodes all N and adds them
in worker order, so every copy applies the same mean and runs repeat bitwise. A worker sends its
payload to, and receives the others' from, N − 1 workers: (N−1)·p bytes each way for a payload of p,
against the float ring's 2(N−1)/N·4n, so a codec pays only while p < 8n/N (8-bit: below 8 workers).
The payload's parts are gathered one collective per kind: bytes (int8 codes, packed signs; four to an
int32 word, since CollectiveGather takes no bytes), float32 (scales, top-k values) and int32 (indices).
"""

from parallel_tf.backports import prod, zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph import codecs
from parallel_tf.graph.aggregation import tree_sum

BYTES = "bytes"  # the kind of the int8 and uint8 parts, gathered together as int32 words


def pays(codec, shapes, workers):
    """(whether gathering every worker's codes of gradients of `shapes` sends fewer bytes than the float ring,
    the bytes gathered from the others, the ring's): (N−1)·p against 2(N−1)/N·4n. With one worker nothing
    crosses either way."""
    elements = [prod(shape) for shape in shapes]
    gathered = (workers - 1) * sum(codec.payload_bytes(n) for n in elements)
    ring = 2 * (workers - 1) * 4 * sum(elements) / workers
    return workers == 1 or gathered < ring, gathered, ring


def mean_of_codes(gradients, collectives, codec, feedback, seeds):
    """(the mean of every worker's `gradients` as decoded from their codes, the payload tensors this worker
    sends); `seeds[i]` draws variable i's random rounding, where the codec has one."""
    payloads, kept = [], []
    for gradient, seed in zip_strict(gradients, seeds):
        payload, keeps = codecs.encoded(codec, gradient, seed, feedback)
        payloads.append(payload)
        kept += keeps
    sent = [part for payload in payloads for part in payload]
    everyone = iter(_gathered(sent, collectives))
    means = []
    for gradient, payload in zip_strict(gradients, payloads):
        parts = [next(everyone) for _ in payload]  # each [N, *the part's shape]
        size = gradient.shape.num_elements()
        decoded = [codec.decode([part[w] for part in parts], size) for w in range(collectives.num_workers)]
        means.append(tf.reshape(tree_sum(decoded) / float(collectives.num_workers), gradient.shape))
    with tf.control_dependencies(kept):
        return [tf.identity(mean) for mean in means], sent


def _gathered(parts, collectives):
    """Every worker's `parts`, each as [N, *its shape], by one gather per kind of part: bytes (int8, uint8,
    four to an int32 word: CollectiveGather takes no bytes) and each other type, flat and concatenated."""
    kinds: dict = {}
    for index, part in enumerate(parts):
        kind = BYTES if part.dtype.base_dtype in (tf.int8, tf.uint8) else part.dtype.base_dtype
        kinds.setdefault(kind, []).append(index)
    gathered = [None] * len(parts)
    for kind, indices in kinds.items():
        flat = [tf.reshape(parts[i], [-1]) for i in indices]
        if kind is BYTES:
            flat = [tf.bitcast(f, tf.uint8) for f in flat]
        rows = _gathered_rows(tf.concat(flat, axis=0), collectives, as_words=kind is BYTES)
        sizes = [parts[i].shape.num_elements() for i in indices]
        for i, piece in zip_strict(indices, tf.split(rows[:, : sum(sizes)], sizes, axis=1)):
            piece = tf.bitcast(piece, parts[i].dtype.base_dtype) if kind is BYTES else piece
            gathered[i] = tf.reshape(piece, [collectives.num_workers, *parts[i].shape.as_list()])
    return gathered


def _gathered_rows(flat, collectives, as_words):
    """[N, length of `flat`] (`as_words`: padded to whole words), every worker's `flat` in worker order."""
    workers = collectives.num_workers
    if not as_words:
        return tf.reshape(collectives.gather(flat), [workers, -1])
    padded = tf.pad(flat, [[0, -flat.shape.num_elements() % 4]])
    words = tf.bitcast(tf.reshape(padded, [-1, 4]), tf.int32)
    return tf.reshape(tf.bitcast(tf.reshape(collectives.gather(words), [workers, -1]), tf.uint8), [workers, -1])
