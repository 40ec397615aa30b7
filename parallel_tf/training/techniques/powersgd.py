"""PowerSGD (Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization", NeurIPS 2019), as PyTorch DDP's powerSGD_hook runs it, in graph mode, all-reduce:
--powersgd_rank=r sends every matrix gradient as two rank-r factors, summed by two all-reduces, with error
feedback and a warm start. --powersgd_start_step=K: plain all-reduce of the whole gradients for the first K
steps (DDP's start_powerSGD_iter), then PowerSGD. --powersgd_min_compression=c: only matrices whose factors
are c times smaller go as factors (DDP's min_compression_rate); vectors and small matrices go whole, with
the losses. It changes the arithmetic (a rank-r approximation is applied), with one worker too; runs repeat
bitwise. `powersgd_matrices` in summary.json counts the matrices sent as factors. It owns all-reduce's reduce
hook (rules.py: one way of reducing at a time); its factors cross the ring as the ring's options say
(--allreduce_bucket_mb: factors in buckets; --allreduce_transport: factors in half precision).

Each matrix gradient G goes as two rank-r factors, each summed by an all-reduce: with M = G + e (e: what
earlier steps' approximations left out, error feedback),

    P = M Q;  P ← mean over workers;  P ← P with orthonormal columns (Gram-Schmidt)
    Q ← Mᵀ P; Q ← mean over workers;  the gradient applied: P Qᵀ;  e ← M − P Qᵀ

(n + m)·r floats cross instead of n·m. Q starts seeded at random, the same on every worker (the
chief's, broadcast), and each step starts from the last one's (warm start): one power iteration a step.
Every worker computes the same P and Q from the same sums, so the copies stay equal; the ring adds in
a fixed order, so runs repeat bitwise. e is each worker's own (a local variable, copied into the
checkpoint at every checkpointed step, graph/worker_state.py, so a resume starts from it). Only matrices
the factors shrink more than `min_compression` times go this way ((n + m)·r·c < n·m, DDP's
min_compression_rate test); the others are sent whole.

Where it differs from DDP's hook, and why: the matrices are DDP's transposed. TensorFlow lays a kernel out
[kh, kw, c_in, c_out] and a dense layer's weights [in, out], and M here is [kh·kw·c_in, c_out] (or
[in, out]), where DDP reshapes PyTorch's [c_out, c_in, kh, kw] to [c_out, c_in·kh·kw]: the same
factorization with P and Q's sides swapped, so not DDP's numbers step for step (one power iteration from a
warm start approximates M's and Mᵀ's leading subspaces alike only in the limit). And the plain all-reduce
steps before PowerSGD starts default to 0 (--powersgd_start_step), where DDP's start_powerSGD_iter
defaults to 1000: DDP's default suits a long training whose first 1000 steps change fast; these recipes
train 1000 steps in all. --powersgd_start_step=1000 gives DDP's.
"""

from parallel_tf.backports import prod, zip_strict
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph import exact_math
from parallel_tf.graph.collectives import Reducing, Reduction, RingMeans
from parallel_tf.graph.model import LOCAL
from parallel_tf.graph.products import contract
from parallel_tf.graph.worker_state import keep
from parallel_tf.training.declarations import Flags, Technique, flag


def check_shapes(values, cluster, shapes):
    """A rank that compresses none of the model's matrices would send them all whole."""
    rank, least = values["powersgd_rank"], values["powersgd_min_compression"]
    if not any(compressible(shape, rank, least) for shape in shapes):
        raise ConfigError(
            f"--powersgd_rank={rank} compresses none of the model's matrices by --powersgd_min_compression="
            f"{least:g}: it would send them all whole"
        )


class Factored(Reducing):
    """PowerSGD's steps, from --powersgd_start_step on: the mean of each matrix it compresses by its factors
    (LowRank's state, made here), the other gradients and the losses by the ring whole."""

    def __init__(self, settings, ring, variables):
        options = settings.options
        self.low_rank = LowRank(variables, options.powersgd_rank, options.powersgd_min_compression, settings.seed)
        self.whole = [i for i in range(len(variables)) if i not in self.low_rank.indices]
        self.ring, self.first = ring, options.powersgd_start_step

    def reduce(self, gradients) -> Reduction:
        ring, factored, step = self.ring, self.low_rank.indices, gradients.whole
        means = dict(zip_strict(factored, self.low_rank.means([step[i] for i in factored], ring)))
        whole_means, losses = ring.means([step[i] for i in self.whole], riding=ring.loss_slots(gradients.loss))
        means.update(zip_strict(self.whole, whole_means))
        return Reduction([means[i] for i in range(len(step))], losses)


def reduce(settings, ring, variables):
    """All-reduce's reduce hook: two phases, the plain ring's steps up to --powersgd_start_step, PowerSGD's from
    there (each kind of step a graph of its own, so what a step sends is counted by its kind)."""
    factored = Factored(settings, ring, variables)
    return [RingMeans(ring), factored] if factored.first else [factored]


def wrap(settings, graph):
    """`powersgd_matrices`: the matrices that cross as factors."""
    rank, least = settings.options.powersgd_rank, settings.options.powersgd_min_compression
    shapes = [v.shape.as_list() for v in tf.trainable_variables()]
    counted = tf.constant(sum(compressible(shape, rank, least) for shape in shapes), tf.int64)
    return graph.counting({"powersgd_matrices": counted})


class Options(Flags):
    powersgd_rank: int = flag(
        0,
        "allreduce: every matrix gradient sent as two rank-r factors (PowerSGD, error feedback); 0: off.",
        lower_bound=0,
    )
    powersgd_start_step: int = flag(
        0,
        "With --powersgd_rank: plain all-reduce for the first this many steps (DDP's start_powerSGD_iter).",
        lower_bound=0,
    )
    powersgd_min_compression: float = flag(
        2.0,
        "With --powersgd_rank: only matrices whose factors are this many times smaller go as factors.",
        lower_bound=1.0,
    )


TECHNIQUE = Technique(
    name="powersgd",
    modes=("allreduce",),
    hooks=("wrap", "reduce"),
    worker_state=lambda values: True,  # each worker's error, e = M − P Qᵀ
    check_shapes=check_shapes,
    options=Options,
)


def as_matrix(shape):
    """(n, m) of a gradient of `shape` seen as a matrix, or None for a vector or scalar."""
    return (prod(shape[:-1]), shape[-1]) if len(shape) >= 2 else None


def compressible(shape, rank, min_compression):
    """Whether rank-`rank` factors of a gradient of `shape` are at least `min_compression` times smaller."""
    matrix = as_matrix(shape)
    return matrix is not None and (matrix[0] + matrix[1]) * rank * min_compression < matrix[0] * matrix[1]


def orthonormal_columns(p):
    """`p` [n, r] with its columns made orthonormal in order, by Gram-Schmidt (a zero column stays zero)."""
    columns: list = []
    for index in range(p.shape.as_list()[1]):
        column = p[:, index]
        for done in columns:
            column -= exact_math.dot(done, column) * done  # in order: the same on TensorFlow 1.15 and 2.x
        columns.append(tf.math.divide_no_nan(column, exact_math.norm(column)))
    return tf.stack(columns, axis=1)


class LowRank:
    """The state of PowerSGD for the `variables` it compresses (`indices` of them): each one's Q and error, made
    once, before any step; a step (means) reads them afresh, so it can run k times in a loop of steps."""

    def __init__(self, variables, rank, min_compression, seed):
        shapes = [v.shape.as_list() for v in variables]
        self.indices = [i for i, shape in enumerate(shapes) if compressible(shape, rank, min_compression)]
        self.shapes = [shapes[i] for i in self.indices]
        self.qs, self.errors = [], []
        for i, shape in zip_strict(self.indices, self.shapes):
            n, m = as_matrix(shape)
            name = variables[i].op.name.replace("/", "_")
            initial = tf.random_normal_initializer(seed=seed + i)
            self.qs.append(tf.get_variable(f"powersgd/q_{name}", [m, rank], initializer=initial, trainable=False))
            error = tf.Variable(tf.zeros([n, m]), trainable=False, collections=LOCAL, name=f"powersgd/e_{name}")
            keep(error)  # each worker's own, in the checkpoint
            self.errors.append(error)

    def means(self, gradients, ring):
        """The rank-r approximations of the mean of every worker's `gradients` (those of `indices`), by two
        rounds of the ring (every P, then every Q: in its buckets and its transport, as DDP's hook runs on
        its buckets and fp16 compresses its factors); the errors and Qs are updated before they are returned."""
        errors, qs = [e.read_value() for e in self.errors], [q.read_value() for q in self.qs]
        matrices = [tf.reshape(g, as_matrix(shape)) + e for g, shape, e in zip_strict(gradients, self.shapes, errors)]
        ps, _ = ring.means([contract(m, q) for m, q in zip_strict(matrices, qs)])
        ps = [orthonormal_columns(p) for p in ps]
        qs, _ = ring.means([contract(m, p, transpose_a=True) for m, p in zip_strict(matrices, ps)])
        approximations = [contract(p, q, transpose_b=True) for p, q in zip_strict(ps, qs)]
        kept = [e.assign(m - a) for e, m, a in zip_strict(self.errors, matrices, approximations)]
        kept += [q.assign(new) for q, new in zip_strict(self.qs, qs)]
        with tf.control_dependencies(kept):
            return [tf.reshape(a, shape) for a, shape in zip_strict(approximations, self.shapes)]
