"""Elastic averaging SGD (Zhang, Choromanska, LeCun, "Deep learning with Elastic Averaging SGD",
NIPS 2015), async and sync modes: --easgd_alpha=α --easgd_period=τ.

Each worker trains its own copy x of the parameters with plain SGD, talking to no one; after every
τ of its steps (and after its last) it exchanges with the centre variable x̃ that the parameter
servers hold. The elastic force pulls the copies towards the centre and the centre towards the
copies. The centre is what is evaluated, checkpointed and fingerprinted.
async: each worker on its own: d = α (x - x̃), x <- x - d, x̃ <- x̃ + d, which conserves x + x̃.
       Exchanges are not ordered across workers, so results are not repeatable; with one worker
       they are exact.
sync:  all workers at once (local_sgd.build_exchanging): each x^i <- x^i - α (x^i - x̃), and the
       chief sets x̃ <- x̃ + α Σ_i (x^i - x̃), summed in the fixed order of ordered aggregation, so
       repeats are bitwise. The paper's moving rate is β = Nα.

How large α may be: an exchange moves the common part e of the copies' distances to the centre
to e (1 - (N+1)α) in sync (each copy moves by α e, the centre by Nα e) and to e (1 - 2α) in
async (one copy and the centre), so the exchanges alone diverge once |1 - (N+1)α| >= 1. Sync
needs α < 2/(N+1) (β = Nα < 2N/(N+1)); async keeps α <= 1/2, where a copy and the centre meet.

Plain SGD only, for the reason local SGD gives (local_sgd.py): a worker's optimizer slots would be
its own. A resume restarts every copy from the centre.
"""

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError
from parallel_tf.graph.aggregation import tree_sum
from parallel_tf.graph.exchange_steps import sends_after
from parallel_tf.graph.model import LOCAL, build_model_on_copies, refresh_copies
from parallel_tf.graph.placement import device_setter, worker_device
from parallel_tf.graph.pushes import count_one, push_counter
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.techniques.local_sgd import EXCHANGE_RUNS, OWN_STEPS, build_exchanging, sgd_on_copies
from parallel_tf.training.train_graph import CopiesGraph, StepReport, once, own_report

NO_GRADIENTS = "EASGD exchanges parameters every --easgd_period steps and pushes no gradients"


def check(values, cluster):
    """Sync only: an α that makes the copies diverge (0 <= α <= 0.5 is its flag's validator's)."""
    alpha, num_workers = values["easgd_alpha"], cluster.num_workers
    if values["mode"] == "sync" and alpha >= 2 / (num_workers + 1):
        raise ConfigError(
            f"--easgd_alpha={alpha} with {num_workers} sync workers: each exchange scales the copies' distance to "
            f"the centre by 1 - (N+1)α = {1 - (num_workers + 1) * alpha:g}, which diverges; α must be below "
            f"2/(N+1) = {2 / (num_workers + 1):.4g}"
        )


class Options(Flags):
    easgd_alpha: float = flag(
        0.0,
        "sync and async: elastic averaging (EASGD): each worker trains its own copy and every --easgd_period steps "
        "moves it and the centre towards each other by this fraction of their difference. 0: off.",
        valid=(lambda alpha: 0 <= alpha <= 0.5, "must be from 0 (off) to 0.5 (a copy and the centre meet)"),
    )
    easgd_period: int = flag(8, "With --easgd_alpha: local steps between exchanges (τ).", lower_bound=1)


TECHNIQUE = Technique(
    name="easgd",
    modes=("sync", "async"),
    check=check,
    hooks=("build",),  # calls none of the mode's hooks: EASGD pushes no gradients
    requires={
        "optimizer": ("sgd", "each copy takes plain SGD steps; an optimizer's slots would be each worker's own"),
        "push_every": (1, NO_GRADIENTS),
        "fetch_every": (1, NO_GRADIENTS),
        "prefetch": (False, "its workers train their own copies and read the centre only at an exchange"),
        "aggregation": ("ordered", "the centre's update sums the copies in the fixed order"),
        "strict_determinism": (False, "each copy follows its own shard, so worker counts differ"),
        "lr_schedule": ("constant", OWN_STEPS),
        "warmup_steps": (0, OWN_STEPS),
    },
    conflicts={"steps_per_run": EXCHANGE_RUNS},
    options=Options,
)


def elastic_exchange(copies, centres, alpha):
    """d = α (x - x̃) computed next to the centre, x̃ <- x̃ + d there, x <- x - d on the worker."""
    moves = []
    for copy, centre in zip_strict(copies, centres):
        with tf.colocate_with(centre):
            d = alpha * (copy.read_value() - centre.read_value())
            pulled = centre.assign_add(d, use_locking=True)  # async: workers exchange with it at once
        with tf.colocate_with(copy):
            moves.append(tf.group(pulled, copy.assign_sub(d)))
    return tf.group(*moves)


class Elastic:
    """Synchronous EASGD's exchange (local_sgd.build_exchanging)."""

    def __init__(self, alpha):
        self.alpha = alpha

    def worker_before(self, pairs):
        """x^i <- x^i - α (x^i - x̃), with x̃ as it was before this exchange (the chief has not moved it yet)."""
        return tf.group(*[copy.assign_sub(self.alpha * (copy - centre.read_value())) for centre, copy in pairs])

    def chief_update(self, copies, centre):
        """x̃ + α Σ_i (x^i - x̃), from every worker's copy written before it moved."""
        return centre + self.alpha * tree_sum(tf.unstack(copies - centre))

    def worker_after(self, pairs):
        return tf.no_op()


def build(settings, recipe, dataset):
    """Local SGD steps on the copy, an elastic exchange every period."""
    period = settings.options.easgd_period
    if settings.mode == "sync":
        return build_exchanging(recipe, dataset, settings, period, Elastic(settings.options.easgd_alpha))
    cluster, task_index = settings.cluster, settings.task_index
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model, pairs = build_model_on_copies(recipe, dataset, on_worker, LOCAL)
        centres, copies = zip_strict(*pairs)
        tf.train.get_or_create_global_step()  # the checkpoints' step: the chief's exchanges cover it
        exchanges = push_counter("exchanges_by_worker", cluster.num_workers)
        local_step = sgd_on_copies(model, copies, settings.base_learning_rate, on_worker)
        with tf.control_dependencies([local_step]):
            exchanged = elastic_exchange(copies, centres, settings.options.easgd_alpha)
        with tf.control_dependencies([exchanged]):
            counted = count_one(exchanges, task_index)
    report = own_report(task_index, model.loss)
    local, exchange = StepReport(**report, train=local_step), StepReport(**report, train=counted)

    def plan(step):
        return [exchange if sends_after(step, period, settings.train_steps) else local]

    return CopiesGraph(
        model=model,
        # Steps whose work reached the centre are done: this worker's exchanges times the period.
        position=tf.minimum(exchanges[task_index] * period, settings.train_steps),
        steps=once(model, local),
        plan=plan,
        counters={"exchanges_by_worker": exchanges},
        refresh_op=refresh_copies(pairs),
    )
