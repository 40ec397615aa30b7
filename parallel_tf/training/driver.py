"""The one driver of a worker's steps. A mode says how one step is built: a function of the model of the step's
batch that returns the step's report (every worker's index and loss it reports, once the step's update is done).
The driver builds it once a session run, or k times inside one (--steps_per_run: a tf.while_loop, as
TPUEstimator's iterations_per_loop and Keras's steps_per_execution do, paying a run's RPC rounds once for k
steps), for each phase of the run (a step that changes from some step on: PowerSGD's warm-up), and says which
run trains which steps. No mode loops by itself, and whatever a technique adds to a step runs inside the loop as
it runs outside it.

A step is built on the model of its own batch, slice i of the run's batches fed stacked (the trainer's data
order and augmentation), reading the parameters through `reads()`: a custom getter made in the step, whose
read_value()s are that step's, after the previous step's update (a variable's plain read would be a snapshot
made once, before the loop). The next step starts once the step's report is in, so a step's report must come
after everything the step changes; one step runs at a time.
"""

from __future__ import annotations  # the types name TensorFlow's, which is imported on first use (compat.py)

import bisect
import dataclasses
from collections.abc import Callable

from parallel_tf.compat import tf
from parallel_tf.graph.model import ModelGraph
from parallel_tf.training.train_graph import StepReport

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
            return dict(zip(self.inputs, (np.stack(arrays) for arrays in zip(*batches, strict=True)), strict=True))
        ((features, labels),) = batches
        return {self.inputs[0]: features, self.inputs[1]: labels}


def drive(settings, recipe, model, phases, reads):
    """The Steps of `phases` (Phase, in order of their first step), as many steps a run as `settings` say
    (--steps_per_run, settled by then): each step built on `model` again (ModelGraph.on), on the fed batch or its
    slice of the stacked batches, reading through `reads()`."""
    steps_per_run = settings.options.steps_per_run
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
