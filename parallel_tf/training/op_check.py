"""A portable run checks the ops it executes (graph/exact_ops.py): the first session run of each kind a worker
makes asks TensorFlow for the graphs it ran, after its graph optimizer, and an op off the allow-list ends the
run with one line (exit 2) naming the op and its node, before any checkpoint holds what it computed."""

from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import exact_ops


class OpCheck:
    """`run(sess, fetches, feed)`: sess.run, the first run of each set of fetches with its partition graphs
    checked, where `enabled` (portable kernels on the CPU)."""

    def __init__(self, enabled):
        self._checked: set | None = set() if enabled else None

    def run(self, sess, fetches, feed):
        kind = _kind(fetches)
        if self._checked is None or kind in self._checked:
            return sess.run(fetches, feed)
        metadata = tf.RunMetadata()
        result = sess.run(fetches, feed, options=tf.RunOptions(output_partition_graphs=True), run_metadata=metadata)
        refuse_off_the_list(metadata.partition_graphs)
        self._checked.add(kind)
        return result


def refuse_off_the_list(graph_defs):
    """ConfigError naming the first op of `graph_defs` a portable run may not execute, if any."""
    found = exact_ops.off_the_list(graph_defs)
    if found:
        op, node = sorted(found.items())[0]
        others = f" (and {', '.join(sorted(found)[1:])})" if len(found) > 1 else ""
        raise ConfigError(
            f"--kernels=portable: this run executes {op} (node {node}){others}: {exact_ops.why_not(op)}; "
            "its bits would not travel between machines (--kernels=fast runs it, with this machine's bits)"
        )


def _kind(fetches):
    """What tells one kind of run from another: the names of the tensors and ops it fetches."""
    return tuple(sorted(getattr(item, "name", str(item)) for item in tf.nest.flatten(fetches)))
