"""Techniques: variants of a mode, each switched on by flags of its own and written as one module.

A technique module has
    TECHNIQUE                   its declaration (training/rules.Technique): modes, flags, when it is on
                                (`enabled`, where it is not "its first flag left its default"), the check
                                of its flags' values if they need one, the flags it requires, what it
                                cannot run with and why, its hooks, whether it builds the mode's graph,
                                the workers a run may lose (`spare_workers`). How declarations compose is
                                rules.py's to say.
    define_flags(flag_values=FLAGS)  the absl definitions of TECHNIQUE.flags
and the hooks it declares: functions of the module named after the seam each fills, with that seam's signature
(training/seams.py: build, wrap, transmit, optimizer, push_learning_rate, push_gradients, send_push, after_push,
and all-reduce's reduce), and a line in TECHNIQUES. A declared flag's value is a field of the run's
Settings.options. That is all a new technique touches in the library; it also gets a row in
docs/modes-and-techniques.md, a hand-computed test and an observable in tests/test_composition.py.
"""

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.graph.optimizers import apply_then_step, make_optimizer
from parallel_tf.graph.pushes import Send
from parallel_tf.training.techniques import (
    adaptive_delay_compensation,
    backup_workers,
    bounded_staleness,
    clipping,
    compression,
    delay_compensation,
    easgd,
    local_sgd,
    local_updates,
    powersgd,
    softsync,
    staleness_aware,
    stragglers,
)

# The wrapping order (rules.py): `wrap` hooks apply in this order, innermost first (modes.build).
TECHNIQUES = (
    backup_workers,
    local_updates,
    staleness_aware,
    softsync,
    bounded_staleness,
    delay_compensation,
    adaptive_delay_compensation,
    local_sgd,
    easgd,
    compression,
    powersgd,
    clipping,
    stragglers,
)
BY_NAME = {t.TECHNIQUE.name: t for t in TECHNIQUES}


def define_flags(flag_values=flags.FLAGS):
    for technique in TECHNIQUES:
        technique.define_flags(flag_values)


def flag_scopes():
    """{flag name: the modes it applies to} for every technique's flags."""
    return {name: t.TECHNIQUE.modes for t in TECHNIQUES for name in t.TECHNIQUE.flags}


def providing(settings, hook):
    """The run's techniques (Settings.techniques, as check_run decided) that provide `hook`, in wrapping order."""
    return [BY_NAME[name] for name in settings.techniques if hook in BY_NAME[name].TECHNIQUE.hooks]


def spare_workers(names, values, cluster):
    """How many non-chief workers a run of techniques `names` with flag `values` may lose and go on (backup
    workers); most 0."""
    declared = [BY_NAME[name].TECHNIQUE for name in names]
    return max((d.spare_workers(values, cluster) for d in declared if d.spare_workers), default=0)


def optimizer_for(settings, learning_rate):
    """The optimizer that applies a run's updates: --optimizer at `learning_rate`, as techniques change
    how it applies them (clipping). A constant rate is made next to the global step, where the updates
    are applied, so it does not cross from the worker with every update."""
    with tf.colocate_with(tf.train.get_global_step()):
        learning_rate = tf.convert_to_tensor(learning_rate, tf.float32)
    return _applying(settings, learning_rate)


def scheduled_optimizer(settings, global_step):
    """The optimizer of the updates `global_step` counts, at the schedule's rate as it applies each: made once,
    so its slots are the run's (every phase of a run applies through it), its rate computed where it applies an
    update, so each step of a loop (train_graph.drive) reads its own global step."""

    def rate():
        with tf.colocate_with(global_step):
            return tf.convert_to_tensor(settings.schedule.at(global_step), tf.float32)

    return _applying(settings, rate)


def _applying(settings, learning_rate):
    """--optimizer at `learning_rate` (a tensor, or a function the optimizer calls as it applies an update), as
    the techniques on change how it applies updates."""
    applies = make_optimizer(settings.optimizer, learning_rate)
    for technique in providing(settings, "optimizer"):
        applies = technique.optimizer(settings, applies)
    return applies


def push_learning_rate(settings, staleness):
    """The learning rate an async push of `staleness` is applied with: the schedule's at the global step
    it is applied at (--learning_rate, without one), unless a technique makes it depend on the staleness."""
    learning_rate = settings.schedule.at(tf.train.get_global_step())
    for technique in providing(settings, "push_learning_rate"):
        learning_rate = technique.push_learning_rate(settings, learning_rate, staleness)
    return learning_rate


def push_gradients(settings, parameters, sums):
    """What an async push applies to `parameters` instead of the received sums `sums`, and on_fetch(after):
    the ops a fetch runs besides refreshing the copies, once ops `after` have run. Unless a technique
    changes them: the sums, and no ops."""
    on_fetch = []
    for technique in providing(settings, "push_gradients"):
        sums, more = technique.push_gradients(settings, parameters, sums)
        on_fetch.append(more)
    return sums, lambda after: [op for ops_after in on_fetch for op in ops_after(after)]


def need_whole_variables(settings):
    """Whether a technique on computes on each variable whole, so a mode must not split variables in pieces."""
    return any(t.TECHNIQUE.whole_variables for t in TECHNIQUES if t.TECHNIQUE.name in settings.techniques)


def transmit(settings, tensors, destinations, device):
    """Gradients `tensors` of this worker (on `device`) as the parameter servers holding `destinations`
    receive them: as they are, unless a technique encodes them on the way (compression)."""
    for technique in providing(settings, "transmit"):  # at most one (rules.SEAMS)
        return technique.transmit(settings, tensors, destinations, device, settings.random_stream)
    return tensors


def send_push(settings, optimizer, sums, parameters, global_step, after):
    """A push, once op `after` has run: `optimizer` applies `sums` to `parameters` at once, unless a
    technique sends them otherwise."""
    for technique in providing(settings, "send_push"):  # at most one (rules.SEAMS)

        def optimizer_at(staleness):
            return optimizer_for(settings, push_learning_rate(settings, staleness))

        return technique.send_push(settings, optimizer, sums, parameters, global_step, after, optimizer_at)
    with tf.control_dependencies([after]):
        return Send(apply_then_step(optimizer, zip(sums, parameters, strict=True), global_step))


def after_push(settings, read_step):
    """Ops a push runs once sent, for the techniques that change what the worker's copy reflects."""
    return [op for t in providing(settings, "after_push") for op in t.after_push(settings, read_step)]
