"""Local SGD / model averaging, sync mode, --local_steps=H > 1 (Zinkevich, Weimer, Smola, Li,
"Parallelized Stochastic Gradient Descent", NIPS 2010; Lin, Stich, Patel, Jaggi, "Don't Use Large
Mini-Batches, Use Local SGD", ICLR 2020).

Each worker trains its own copy of the parameters on its shard with plain SGD, without talking to
anyone, for H steps; then every copy is written to its slot on the parameter servers, the chief
averages the N slots in the fixed order of ordered aggregation (aggregation.tree_sum) into the
parameters, and every worker's copy takes the average. One exchange every H steps instead of
every step; repeats stay bitwise. H = 1 is sync mode up to rounding (the mean of N steps instead of
one step by the mean gradient).

Optimizer slots: the local steps are plain SGD at --learning_rate, so there are none. Momentum or
Adam state would be each worker's own, never averaged and lost at every average (or averaged,
which is another algorithm); rather than pick one silently, --local_steps needs --optimizer=sgd.
The copies are local: a resume restarts from the last average (the global step counts the steps
it covers). Synchronous EASGD (easgd.py) trains the same way with another exchange rule:
`build_exchanging` takes the rule.
"""

import dataclasses

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.aggregation import SlotAggregator, tree_sum
from parallel_tf.graph.barrier import gather_at_chief, release_workers
from parallel_tf.graph.exchange_steps import sends_after
from parallel_tf.graph.model import LOCAL, build_model_on_copies, refresh_copies
from parallel_tf.graph.placement import device_setter, worker_device
from parallel_tf.training.declarations import Flags, Technique, flag
from parallel_tf.training.train_graph import CopiesGraph, StepReport, once, own_report

OWN_STEPS = (
    "the copies take plain SGD steps at one rate (--learning_rate, linearly scaled); a schedule is not defined "
    "for them yet"
)
EXCHANGE_RUNS = "an exchange every few steps is a session run of its own kind, between the local steps' runs"


class Options(Flags):
    local_steps: int = flag(
        1,
        "sync: each worker takes this many plain SGD steps on its own copy, then the copies are averaged "
        "in a fixed order (local SGD). 1: every step is synchronous.",
        lower_bound=1,
    )


TECHNIQUE = Technique(
    name="local_sgd",
    modes=("sync",),
    hooks=("build",),  # sends parameters every H steps, not gradients: calls none of sync's hooks
    requires={
        "aggregation": ("ordered", "the copies are averaged in the fixed order of ordered aggregation"),
        "strict_determinism": (False, "each copy follows its own shard, so worker counts differ"),
        "optimizer": ("sgd", "an optimizer's slots would be each worker's own and never averaged"),
        "lr_schedule": ("constant", OWN_STEPS),
        "warmup_steps": (0, OWN_STEPS),
    },
    conflicts={"steps_per_run": EXCHANGE_RUNS},
    options=Options,
)


def build(settings, recipe, dataset):
    """Local steps on the copies, an average every --local_steps."""
    return build_exchanging(recipe, dataset, settings, settings.options.local_steps, Average())


class Average:
    """Local SGD's exchange: the chief sets the parameters to the mean of the copies; each copy takes it."""

    def worker_before(self, pairs):
        return tf.no_op()

    def chief_update(self, copies, parameter):
        """A parameter's new value from `copies`, every worker's copy of it stacked."""
        return tree_sum(tf.unstack(copies)) / float(copies.shape.as_list()[0])  # a Dimension in TensorFlow 1.15

    def worker_after(self, pairs):
        return refresh_copies(pairs)


def build_exchanging(recipe, dataset, settings, period, rule):
    """Sync training on per-worker copies: plain SGD steps on the copy, and every `period` steps (and
    after the last) an exchange through the slots: each worker writes its copy and runs
    rule.worker_before, the chief sets the parameters to rule.chief_update once all have written, and
    each worker runs rule.worker_after once released. Local SGD and synchronous EASGD are two rules."""
    cluster, task_index = settings.cluster, settings.task_index
    num_workers, is_chief = cluster.num_workers, task_index == 0
    on_worker = worker_device(task_index, settings.num_gpus)
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model, pairs = build_model_on_copies(recipe, dataset, on_worker, LOCAL)
        parameters, copies = zip_strict(*pairs)
        global_step = tf.train.get_or_create_global_step()  # the steps the last exchange covers
        exchanges = tf.get_variable("exchanges", [], tf.int64, tf.zeros_initializer(), trainable=False)
        step = tf.placeholder(tf.int64, [], name="step")
        local_step = sgd_on_copies(model, copies, settings.base_learning_rate, on_worker)
        slots = SlotAggregator(parameters, num_workers)
        with tf.control_dependencies([local_step]):
            write = slots.write(task_index, [[c.read_value() for c in copies]])
        with tf.control_dependencies([write]):
            before = rule.worker_before(pairs)
        workers, losses = gather_at_chief(num_workers, task_index, model.loss, after=[before], name="written")
        done = _update(slots, rule, global_step, exchanges, step + 1, after=[workers]) if is_chief else workers
        released = release_workers(num_workers, task_index, after=[done])
        with tf.control_dependencies([released]):
            exchanged = rule.worker_after(pairs)
    report = own_report(task_index, model.loss)
    local = StepReport(**report, train=local_step)
    exchange = StepReport(workers=workers, losses=losses, train=exchanged)

    def plan(at):
        return [exchange if sends_after(at, period, settings.train_steps) else local]

    return _ExchangingGraph(
        model=model,
        position=global_step,
        steps=once(model, local),
        plan=plan,
        refresh_op=refresh_copies(pairs),
        counters={"exchanges": exchanges},
        step_input=step,
    )


def sgd_on_copies(model, copies, learning_rate, device):
    """A plain SGD step on the worker's own copies of the parameters, on `device`."""
    with tf.device(device):
        gradients = tf.gradients(model.loss, list(copies))
        with tf.control_dependencies(gradients):
            return tf.group(*[c.assign_sub(learning_rate * g) for c, g in zip_strict(copies, gradients)])


def _update(slots, rule, global_step, exchanges, steps_done, after):
    """Each parameter set to the rule's value, computed next to its slots, then the steps and the exchange recorded."""
    assigns = []
    for slot, parameter in zip_strict(slots.slots, slots.variables):
        with tf.colocate_with(slot), tf.control_dependencies(after):
            assigns.append(parameter.assign(rule.chief_update(slot.read_value(), parameter.read_value())))
    with tf.control_dependencies(assigns):
        return tf.group(global_step.assign(steps_done), exchanges.assign_add(1))


@dataclasses.dataclass(frozen=True)
class _ExchangingGraph(CopiesGraph):
    """Feeds the step, which the chief's exchange records as the steps it covers."""

    step_input: object = None

    def feed(self, step):
        return {self.step_input: step}
