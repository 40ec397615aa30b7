"""A sync step whose parameter servers release each piece of the model as soon as it is updated: BytePS's
pipeline (Jiang et al., "A Unified Architecture for Accelerating Distributed DNN Training in Heterogeneous
GPU/CPU Clusters", OSDI 2020), each piece pushed as soon as backprop has made its gradients (P3's order:
Jayarajan et al., "Priority-based Parameter Propagation for Distributed DNN Training", SysML 2019).

A plain sync step (modes/sync/__init__.py) reads every parameter, computes, writes every gradient and waits until the
chief has applied them all, so a worker's link carries the model in, and then the model out. Here each server's
share is cut into p pieces of about equal bytes (`rounds`: round r is the r-th piece of every server), and a
step ends, piece by piece:
- each worker sends its gradients of the piece, one vector, into the piece's slots, and says so on the piece's
  queue;
- the chief takes the piece's N arrivals, sums its slots in worker order and applies them, variable by variable
  as the plain step does (so the bits are the plain step's), and gives every other worker a token;
- each worker then pulls the piece, one vector, into its copy of it; its next step reads the copies.
Graph dataflow does the overlap (no threads of our own): a piece's pull crosses while other pieces' pushes
do, the pieces landing one after another as the transport sends them. A round-by-round order forced on top,
each round sent once the one before has landed or been pulled, was slower: the sign it waits for comes back
behind the pulls (BENCHMARKS.md, "Pieces pulled when ready").
"""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.barrier import constant_at, shared_queue, taken
from parallel_tf.graph.model import LOCAL, copy_of
from parallel_tf.graph.server_vectors import by_server, read_packed, sent_packed


def rounds(variables, pieces_per_server):
    """Each server's `variables`, in their order (the forward pass's), cut into `pieces_per_server` runs of about
    equal bytes: [round [piece [index into variables]]], round r holding the r-th run of every server that has
    one (a variable larger than a run makes the runs after it empty)."""
    index = {variable.op.name: v for v, variable in enumerate(variables)}
    by_round: list[list] = [[] for _ in range(pieces_per_server)]
    for group in by_server(variables):
        sizes = [variable.shape.num_elements() for variable in group]
        total, filled = sum(sizes), 0
        runs: list[list] = [[] for _ in range(pieces_per_server)]
        for variable, size in zip_strict(group, sizes):  # a variable goes to the run its middle byte falls in
            middle = filled + size / 2
            runs[min(pieces_per_server - 1, int(middle * pieces_per_server / total))].append(index[variable.op.name])
            filled += size
        for r, run in enumerate(runs):
            if run:
                by_round[r].append(run)
    return [pieces for pieces in by_round if pieces]


def worker_copies(variables, device):
    """{variable's op name: its copy on `device`}, a local variable each worker starts as the variable's value."""
    return {variable.op.name: copy_of(variable, device, LOCAL) for variable in variables}


class Pipeline:
    """The pieces of `aggregator`'s variables (rounds of `pieces_per_server`) and a step's exchange of them among
    `num_workers`, as worker `task_index` builds it, pulling into `copies` (worker_copies)."""

    def __init__(self, aggregator, copies, pieces_per_server, num_workers, task_index):
        self.aggregator, self.copies = aggregator, copies
        self.rounds = rounds(aggregator.variables, pieces_per_server)
        self.num_workers, self.task_index = num_workers, task_index

    @property
    def pieces(self):
        return sum(len(pieces) for pieces in self.rounds)

    def step(self, gradients_by_microbatch, loss, first_microbatch, optimizer, global_step):
        """(workers, losses), the report of a step that sends this worker's `gradients_by_microbatch[k][v]`
        (microbatch k, variable v) into slot rows from `first_microbatch` on, with its `loss`: the chief's, of
        every worker, once every piece is applied with `optimizer` and `global_step` counts the step; another
        worker's, its own, once its copies hold the step's update."""
        done, reported = [], None
        # named round by round, the last layers' round first, as backprop makes their gradients first; when each
        # piece goes is the dataflow's, not this order's
        for number, pieces in enumerate(reversed(self.rounds)):
            for p, piece in enumerate(pieces):
                sent = [[gradients[v] for v in piece] for gradients in gradients_by_microbatch]
                name = f"parallel_tf_pipeline_{number}_{p}"
                with tf.name_scope(name):  # a trace (--trace_steps) names each piece's ops by it
                    queue, arrival = self._push(name, piece, sent, loss, first_microbatch)
                    released, arrivals = self._release(name, piece, queue, arrival, optimizer)
                    done += [released, self._pull(piece, after=released)]
                reported = reported or arrivals  # the chief's first: every worker's index and loss
        if self.task_index:
            with tf.control_dependencies(done):
                return tf.constant([self.task_index]), tf.reshape(loss, [1])
        with tf.colocate_with(global_step), tf.control_dependencies(done):
            counted = global_step.assign_add(1)
        assert reported is not None, "a step has at least one piece"
        with tf.control_dependencies([counted]):
            return tuple(tf.identity(tensor) for tensor in reported)

    def _push(self, name, piece, gradients_by_microbatch, loss, first_microbatch):
        """(the piece's queue `name`, and this worker's arrival on it, once its gradients of `piece`
        (gradients_by_microbatch[k][i], of variable piece[i]) and its loss, sent as one vector, are written into
        their slots)."""
        variables = [self.aggregator.variables[v] for v in piece]
        server = variables[0].device
        rows, (loss,) = sent_packed(gradients_by_microbatch, variables, riding=[loss])  # the piece's one server
        with tf.device(server):  # what waits for the write waits on the server, not on a round trip to here
            written = self.aggregator.write(first_microbatch, rows, only=piece)
        queue = shared_queue(name, server, [tf.int32, tf.float32], [[], []])
        index = constant_at(self.task_index, server)
        with tf.device(server), tf.control_dependencies([written]):
            return queue, queue.enqueue((index, loss))

    def _release(self, name, piece, queue, arrival, optimizer):
        """(the release of `piece` to this worker, and the chief's every worker's (index, loss) on it): the chief
        takes all N arrivals, applies the piece and gives every other worker a token; they wait for theirs."""
        server, count = self.aggregator.variables[piece[0]].device, self.num_workers
        if self.task_index:
            token = shared_queue(f"{name}_release_{self.task_index}", server, [tf.int32], [[]])
            with tf.device(server), tf.control_dependencies([arrival]):
                return token.dequeue(), None
        with tf.device(server), tf.control_dependencies([arrival]):
            arrivals = taken(queue, constant_at(count, server), count)
        with tf.device(server):  # the tokens wait for the update on the server, not on a round trip to the chief
            applied = self.aggregator.apply(optimizer, None, after=arrivals, only=piece)
        tokens = [shared_queue(f"{name}_release_{w}", server, [tf.int32], [[]]) for w in range(1, count)]
        token = constant_at(0, server)
        with tf.device(server), tf.control_dependencies([applied]):
            return tf.group(*[queue.enqueue(token) for queue in tokens]), arrivals

    def _pull(self, piece, after):
        """The read of `piece` once ops `after` have run, as one vector, into this worker's copies."""
        values = read_packed([self.aggregator.variables[v] for v in piece], after=[after])
        return tf.group(*[self.copies[name].assign(value) for name, value in values.items()])
