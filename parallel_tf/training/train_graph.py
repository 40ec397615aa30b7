"""The graph a worker trains with, whatever its mode: a mode's step, built into session runs by the one driver
(`drive`), and all the trainer (trainer.py) knows of the graph: its `TrainGraph`.

A mode says how one step is built: a function of the model of the step's batch that returns the step's
`StepReport` (every worker's index and loss it reports, once the step's update is done). The driver builds it
once a session run, or k times inside one (--steps_per_run: a tf.while_loop, as TPUEstimator's
iterations_per_loop and Keras's steps_per_execution do, paying a run's RPC rounds once for k steps), for each
phase of the run (a step that changes from some step on: PowerSGD's warm-up), and says which run trains which
steps. No mode loops by itself, and whatever a technique adds to a step runs inside the loop as it runs outside
it. A step is built on the model of its own batch, slice i of the run's batches fed stacked (the trainer's data
order and augmentation), reading the parameters through `reads()`: a custom getter made in the step, whose
read_value()s are that step's, after the previous step's update (a variable's plain read would be a snapshot
made once, before the loop). The next step starts once the step's report is in, so a step's report must come
after everything the step changes; one step runs at a time.

The trainer knows a mode only through its `TrainGraph`: what to run and feed each step, where the worker starts,
what it initialises while joining, what runs in the background and before evaluation, and which counters the
chief logs. Every hook has a default that does nothing, and a mode overrides the ones it needs, so the trainer
never asks which mode it runs.
"""

from __future__ import annotations  # the types name TensorFlow's, which is imported on first use (compat.py)

import bisect
import dataclasses
from typing import Callable  # not collections.abc's: subscripted at run time, which Python 3.7's refuses

from parallel_tf.backports import TypedDict, zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph.model import ModelGraph
from parallel_tf.graph.worker_state import Stash


class StepReport(TypedDict, total=False):
    """What the last run of a step's plan fetches: `workers` and their shard `losses` (always), which the
    chief logs; `train` (and `local_update`), the ops the run trains with where the losses do not wait for
    them; `next_step`, the step this worker runs next where it is not the following one (backup workers)."""

    workers: tf.Tensor  # int32[k]
    losses: tf.Tensor  # float32[k], in the order of `workers`
    train: tf.Operation
    next_step: tf.Tensor
    local_update: tf.Operation  # Downpour's SGD step on the worker's copies (techniques/local_updates.py)


Plan = Callable[[int], list]  # (step) -> the fetches to run, in order; the last a StepReport
SessionHook = Callable[["tf.Session"], None]  # a string: naming tf.Session here would import TensorFlow


Step = Callable[[ModelGraph], StepReport]  # (the model of the step's batch) -> its report


@dataclasses.dataclass(frozen=True)
class Phase:
    """Steps from `first` on (to the next phase's first) are built by `step`."""

    first: int
    step: Step


@dataclasses.dataclass(frozen=True)
class Steps:
    """What the driver built: the run's inputs, and for each phase the report a run of its steps fetches."""

    inputs: tuple  # (features, labels) placeholders: of one step's batch, or (stacked) a run's batches by step
    starts: tuple  # each phase's first step, rising
    reports: tuple  # each phase's StepReport: of a run's last step
    steps_per_run: int = 1
    stacked: bool = False

    def report(self, step):
        """The report of a run that starts at `step`: its phase's."""
        return self.reports[bisect.bisect_right(self.starts, step) - 1]

    def run_end(self, step):
        """The step after the run that starts at `step`: the next multiple of steps_per_run (so runs end at the
        boundaries the intervals it divides fall on, even where a worker joins between them), or the next phase's
        first step, where that comes first."""
        end = step - step % self.steps_per_run + self.steps_per_run
        later = self.starts[bisect.bisect_right(self.starts, step) :]
        return min(end, later[0]) if later else end

    def feed(self, batches):
        """The feed of a run's `batches` ((features, labels) of each of its steps, in order)."""
        import numpy as np  # here, not at the top: the launcher imports the modes and must stay single-threaded

        if self.stacked:
            return dict(zip_strict(self.inputs, (np.stack(arrays) for arrays in zip_strict(*batches))))
        ((features, labels),) = batches
        return {self.inputs[0]: features, self.inputs[1]: labels}


def drive(settings, recipe, model, phases, reads):
    """The Steps of `phases` (Phase, in order of their first step), as many steps a run as `settings` say
    (--steps_per_run, settled by then): each step built on `model` again (ModelGraph.on), on the fed batch or its
    slice of the stacked batches, reading through `reads()`."""
    steps_per_run = settings.options.steps_per_run or 1  # None: a mode --steps_per_run is not for
    if steps_per_run == 1:
        on_fed = model.on(recipe, model.features, model.labels, reads())
        reports = tuple(phase.step(on_fed) for phase in phases)
        return Steps((model.features, model.labels), tuple(p.first for p in phases), reports)
    features = tf.placeholder(tf.float32, [None, *model.features.shape.as_list()], name="features_by_step")
    labels = tf.placeholder(tf.int64, [None, None], name="labels_by_step")

    def on_step(index):
        return model.on(recipe, features[index], labels[index], reads())

    reports = tuple(_looped(phase.step, on_step, tf.shape(features)[0]) for phase in phases)
    return Steps((features, labels), tuple(p.first for p in phases), reports, steps_per_run, stacked=True)


def once(model, report):
    """The Steps of a mode that builds its step on `model` itself, one a session run, and says what each run
    fetches by a plan of its own (TrainGraph.plan): `report`."""
    return Steps((model.features, model.labels), (0,), (report,))


def _looped(step, on_step, count):
    """The report of the last of `count` steps, built by `step`, one after another in a tf.while_loop."""

    def one_step(index, workers, losses):
        with tf.control_dependencies([workers, losses]):  # the previous step's update is applied
            report = step(on_step(index))
        return index + 1, report["workers"], report["losses"]

    start = (tf.constant(0), tf.zeros([0], tf.int32), tf.zeros([0], tf.float32))  # before any step: no report
    _, workers, losses = tf.while_loop(
        lambda index, *_: index < count,
        one_step,
        start,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None])),
        parallel_iterations=1,
    )
    return StepReport(workers=workers, losses=losses)


@dataclasses.dataclass(frozen=True)
class TrainGraph:
    """What a worker needs to train, whatever the mode: `runs(step)` gives the fetches to run at `step`, the last
    a run of the driver's `steps`."""

    model: ModelGraph  # the model on the fed batch, reading the parameters as they are: what the chief evaluates
    position: tf.Tensor  # int: the first step this worker has still to run
    steps: Steps  # the inputs of a run, and the report a run of each phase fetches
    plan: Plan | None = None  # (step) -> the fetches to run at `step`, where a mode runs more than its step's report
    # How a worker joins. Left None, each is derived once every technique has wrapped the graph
    # (with_join_fields); a builder that joins otherwise (SyncReplicasOptimizer, a group's central ps) gives its own.
    init_variables: list | None = None  # the chief (worker 0) initialises these; they, less SCRATCH, are its checkpoint
    ready_op: tf.Tensor | None = None  # empty once everything this worker uses is initialised
    local_init_op: tf.Operation | None = None  # every worker runs it once ready_for_local_init_op is empty
    ready_for_local_init_op: tf.Tensor | None = None
    counters: dict[str, tf.Tensor] = dataclasses.field(default_factory=dict)  # logged and summarised by the chief
    chief_waits_for_all: bool = True  # the chief evaluates only once every worker has run its last step
    initialise_on_join: SessionHook | None = None  # run while joining, before this worker counts as ready
    background: SessionHook | None = None  # run in a thread from the first step; awaited after the last
    pause_before_step: float = 0.0  # seconds this worker sleeps before each step (a straggler, for studies)
    # (sess, {name: value} of its parameters) -> None: every worker, when done
    after_last_step: Callable[[tf.Session, dict], None] | None = None
    # every worker's own state a resume needs (worker_state.py): copied for the chief's checkpoints, restored on joining
    stash: Stash | None = None

    def runs(self, step):
        """The fetches to run at `step`, in order: the last a StepReport, of a run of the steps from `step` to
        run_end(step)."""
        return self.plan(step) if self.plan else [self.steps.report(step)]

    def feed(self, step):
        """Tensors to feed at `step` besides the batch (e.g. the step itself)."""
        return {}

    def run_end(self, step):
        """The step after the run that starts at `step` (Steps.run_end)."""
        return self.steps.run_end(step)

    def next_step(self, step, result):
        """The step this worker runs after `step`, from the last run's result (the trainer stops at the end)."""
        return self.run_end(step)

    def before_evaluation(self, sess):
        """Run by the chief before it evaluates, so the model reads the final parameters."""

    def counting(self, counters):
        """This graph, logging `counters` ({name: tensor}) besides its own: a technique's `wrap`."""
        return dataclasses.replace(self, counters={**self.counters, **counters})


@dataclasses.dataclass(frozen=True)
class CopiesGraph(TrainGraph):
    """A mode that computes on copies of the parameters (async, hierarchical): the chief refreshes its
    copy before evaluating, so it evaluates the parameters themselves."""

    refresh_op: tf.Operation | None = None

    def before_evaluation(self, sess):
        sess.run(self.refresh_op)


def with_join_fields(graph):
    """`graph` with the join fields left None derived, once every technique has wrapped it, so that a
    variable any of them made is initialised and checkpointed: the chief initialises every global
    variable, and each worker its local ones (copies, residuals, clocks) once the global ones exist."""
    fields = {}
    if graph.init_variables is None:
        fields["init_variables"] = tf.global_variables()
    if graph.ready_op is None:
        fields["ready_op"] = tf.report_uninitialized_variables()
    if graph.local_init_op is None and tf.local_variables():
        fields["local_init_op"] = tf.local_variables_initializer()
        if graph.stash:  # then each kept variable from its slot: zeros, or a resume's values
            with tf.control_dependencies([fields["local_init_op"]]):
                fields["local_init_op"] = graph.stash.restore()
        fields["ready_for_local_init_op"] = tf.report_uninitialized_variables(tf.global_variables())
    return dataclasses.replace(graph, **fields)


def own_report(task_index, loss):
    """The report of a worker that steps on its own (async, local SGD, backup workers): its index and
    its loss, shaped as a barrier's report of several workers is."""
    return StepReport(workers=tf.constant([task_index]), losses=tf.reshape(loss, [1]))


def microbatch_passes(settings, per_worker):
    """Strict determinism's counter: the forward and backward passes each worker makes a step, as built."""
    if not settings.options.strict_determinism:
        return {}
    return {"microbatch_passes": tf.constant(per_worker, tf.int64)}
