"""Several training steps in one session run (--steps_per_run), as TPUEstimator's iterations_per_loop
and Keras's steps_per_execution do: each session run of a parameter-server step costs RPC rounds of
its own (the master starting every task's partition, the results coming back), and a
`tf.while_loop` pays them once for k steps. TensorFlow partitions the loop across the tasks, each
with its own copy of the loop's control; the queues of the step's barriers work inside it as they
do between runs.

Each iteration is one step exactly as a run of it would be: its batch is slice i of batches fed
stacked, so the data order and augmentation are the trainer's; its reads of the parameters are
`read_value()`s made inside the loop, once a step, after the previous step, since a variable's
ordinary read is a snapshot made once, outside the loop, which would train on stale values without
an error; and one iteration runs at a time.
"""

from parallel_tf.compat import tf


def steps_in_one_run(recipe, model, step, reads):
    """((features, labels) placeholders for the run's batches stacked by step, (workers, losses) of its
    last step). `step(model) -> (workers, losses)` builds one step on a model of that step's batch, whose
    variables `reads()`, a custom getter made in the step, reads with `read_value()`s: once a step, inside
    the loop (every forward pass of the step, strict's microbatches too, through the same reads)."""
    features = tf.placeholder(tf.float32, [None, *model.features.shape.as_list()], name="features_by_step")
    labels = tf.placeholder(tf.int64, [None, None], name="labels_by_step")

    def one_step(index, workers, losses):
        with tf.control_dependencies([workers, losses]):  # the previous step's update is applied
            on_step = model.on(recipe, features[index], labels[index], reads())
            workers, losses = step(on_step)
        return index + 1, workers, losses

    start = (tf.constant(0), tf.zeros([0], tf.int32), tf.zeros([0], tf.float32))  # before any step: no report
    _, workers, losses = tf.while_loop(
        lambda index, *_: index < tf.shape(features)[0],
        one_step,
        start,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None])),
        parallel_iterations=1,
    )
    return (features, labels), (workers, losses)


class StepReads:
    """A custom getter (graph/model.py's model_on) that answers each variable with one `read_value()`, made
    where the step first asks for it: inside a loop's step, that step's read, after the previous step's
    update (a worker's own variables: all-reduce's replicas, async's copies, given as `instead`, {a
    parameter's op name: the copy read in its place}). `of(variables)`: what the step's gradients are
    taken with respect to."""

    def __init__(self, instead=None):
        self._values = {}
        self._instead = instead or {}

    def __call__(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        variable = self._instead.get(variable.op.name, variable)
        if variable.op.name not in self._values:
            self._values[variable.op.name] = variable.read_value()
        return self._values[variable.op.name]

    def of(self, variables):
        return [self._values[variable.op.name] for variable in variables]
