"""Hierarchical (process-group) training, as in the seed: synchronous in a group, asynchronous between groups.

Group g's workers train synchronously on copies of the parameters held by their own local
parameter server (job local_ps, task g): SyncReplicasOptimizer over the group and the sync
mode's barrier, the group's lowest-numbered worker acting as its chief. The averaged gradients
the group applies are also summed, and every --central_every group steps the group's chief
sends the sum to the central parameter servers (job ps) through the plain optimizer, whenever it
gets there (no coordination with other groups), then copies the central values back into its
local ps. The central parameters are the result.

A worker sees only the central ps, its group's local ps and itself (device filters), so no
process can initialise everything: worker 0 initialises the central parameters, and each group's
chief initialises its local ps once the central ones are ready.
"""

import dataclasses
import time

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.errors import chief_did_not_initialise
from parallel_tf.graph.barrier import step_barrier
from parallel_tf.graph.exchange_steps import sends_after
from parallel_tf.graph.model import build_model_on_copies, refresh_copies
from parallel_tf.graph.optimizers import DelegatingOptimizer, apply_then_step, make_optimizer
from parallel_tf.graph.placement import device_setter, server_cpu
from parallel_tf.graph.pushes import GradientSum, push_counter
from parallel_tf.graph.sync_replicas import sync_replicas
from parallel_tf.training.declarations import Mode
from parallel_tf.training.modes.hierarchical import central_every
from parallel_tf.training.modes.hierarchical.groups import check, check_groups_by_host, define_flags
from parallel_tf.training.train_graph import CopiesGraph, StepReport, once

GLOBAL = ["variables"]  # tf.GraphKeys.GLOBAL_VARIABLES, without importing TensorFlow
POLL_SECS = 0.1  # a group chief asking whether worker 0 has initialised the central parameters


class _SummingOptimizer(DelegatingOptimizer):
    """Applies gradients with `optimizer` and also adds them into `sums` ({variable: sum variable}).

    Handed to SyncReplicasOptimizer, it sees the group's averaged gradients as they are applied.
    """

    def __init__(self, optimizer, sums):
        super().__init__(optimizer)
        self._sums = sums

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        applied = super().apply_gradients(grads_and_vars, global_step, name)
        return tf.group(applied, *[self._sums[v].assign_add(g) for g, v in grads_and_vars])


@dataclasses.dataclass(frozen=True)
class _GroupChiefInit:
    """A group chief's part in joining: once worker 0 has initialised the central parameters, it
    initialises its local ps from them (prepare_session's init_fn)."""

    init_op: object
    central_uninitialised: object
    startup_timeout: float

    @classmethod
    def made(cls, central, startup_timeout):
        """A group chief's, which initialises its local ps once `central` (the central variables) are."""
        group_variables = [v for v in tf.global_variables() if v.device.startswith("/job:local_ps/")]
        return cls(
            tf.variables_initializer(group_variables), tf.report_uninitialized_variables(central), startup_timeout
        )

    def __call__(self, sess):
        deadline = time.time() + self.startup_timeout
        while sess.run(self.central_uninitialised).size:
            if time.time() > deadline:
                raise chief_did_not_initialise(self.startup_timeout)
            time.sleep(POLL_SECS)
        sess.run(self.init_op)


def build(recipe, dataset, settings):
    cluster, task_index = settings.cluster, settings.task_index
    group = cluster.group_of(task_index)
    members = sorted(cluster.groups[group])
    is_group_chief = task_index == members[0]
    local_ps = server_cpu("local_ps", group)
    with tf.device(device_setter(cluster, task_index, settings.num_gpus)):
        model, pairs = build_model_on_copies(recipe, dataset, local_ps, GLOBAL)
        parameters, copies = zip_strict(*pairs)
        central_step = tf.train.get_or_create_global_step()  # counts updates applied to the central parameters
        exchanges = push_counter("central_exchanges_by_group", len(cluster.groups))
        with tf.device(local_ps):
            # Steps whose update reached the central ps are done: a resumed group starts after them.
            sent_steps = tf.minimum(exchanges[group] * settings.options.central_every, settings.train_steps)
            group_step = tf.Variable(sent_steps, dtype=tf.int64, trainable=False, name="group_step")
            group_sum = GradientSum(copies, GLOBAL, "group_gradient_sum")
        optimizer = make_optimizer(settings.optimizer, settings.base_learning_rate)
        summing = _SummingOptimizer(optimizer, dict(zip_strict(copies, group_sum.variables)))
        replicas = sync_replicas(
            summing, model.loss, group_step, len(members), len(members), is_group_chief, var_list=list(copies)
        )
        step_ops = [replicas.train_op, replicas.sync_op] if is_group_chief else [replicas.train_op]
        with tf.control_dependencies(step_ops):  # read_value, not the variable: it must read after the step
            group_update = [s.read_value() for s in group_sum.variables]
        central_optimizer = make_optimizer(settings.optimizer, settings.base_learning_rate)
        applied = apply_then_step(central_optimizer, zip_strict(group_update, parameters), central_step)
        sent = group_sum.push(applied, exchanges, group)
        with tf.control_dependencies([sent]):
            exchange = refresh_copies(pairs)
        refresh = refresh_copies(pairs)

    def step_report(after):
        workers, losses = step_barrier(members, task_index, model.loss, after, local_ps)
        return StepReport(workers=workers, losses=losses)

    plain_step = step_report(step_ops)
    step_and_exchange = step_report([exchange]) if is_group_chief else plain_step

    def plan(step):
        exchanging = is_group_chief and sends_after(step, settings.options.central_every, settings.train_steps)
        return [step_and_exchange if exchanging else plain_step]

    central = [v for v in tf.global_variables() if v.device.startswith("/job:ps/")]
    return CopiesGraph(
        model=model,
        position=group_step,
        steps=once(model, plain_step),
        plan=plan,
        init_variables=central,
        local_init_op=replicas.local_init_op,
        ready_for_local_init_op=replicas.ready_for_local_init_op,
        counters={"central_exchanges_by_group": exchanges},
        initialise_on_join=_GroupChiefInit.made(central, settings.startup_timeout) if is_group_chief else None,
        refresh_op=refresh,
    )


MODE = Mode(
    name="hierarchical",
    build=build,
    groups=True,
    flags=("num_groups", "groups"),
    check=check,
    check_layout=check_groups_by_host,
    options=(central_every,),
)
__all__ = ["MODE", "build", "define_flags"]  # define_flags: the groups' flags, groups.py's
