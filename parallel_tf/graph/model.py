"""The part of the graph every mode shares: inputs, the recipe's model, loss, accuracy.

Every mode, and the single-process reference run, builds its model through `build_model` as
the first thing in a fresh graph with the same seed, so op-level seeds (derived by TF from the
graph seed and op ids) and therefore initial parameters are identical everywhere.
"""

from __future__ import annotations  # the tf.Tensor annotations below must not import TensorFlow

import dataclasses
import random

from parallel_tf.backports import zip_strict
from parallel_tf.compat import tf
from parallel_tf.graph import exact_math, products
from parallel_tf.graph.initial_values import seeded, whole_then_sliced
from parallel_tf.graph.placement import pieces_over, split_by, whole

# Variables rewritten every step before they are read (gradient slots): not worth a checkpoint.
SCRATCH = "parallel_tf_scratch"
LOCAL = ["local_variables"]  # tf.GraphKeys.LOCAL_VARIABLES (a worker's own, never saved), without importing TF


@dataclasses.dataclass(frozen=True)
class ModelGraph:
    features: tf.Tensor
    labels: tf.Tensor
    loss: tf.Tensor  # mean cross-entropy over the fed examples
    accuracy: tf.Tensor  # fraction of the fed examples classified correctly
    num_classes: int
    reads: object = None  # the custom getter through which the forward pass read its variables, if any
    split_over: int = 0  # the pieces its large variables are cut into, over the servers (placement.py); 0: whole

    def on(self, recipe, features, labels, reads=None):
        """The recipe's model again, on other `features` and `labels` (a microbatch, a step of a loop), its
        variables reused, and read through `reads` (default this model's)."""
        return model_on(recipe, features, labels, self.num_classes, reads or self.reads, True, self.split_over)


class StepReads:
    """The reads of a step that may run inside a loop of steps (train_graph.drive): a custom getter (model_on's)
    that answers each variable with one `read_value()`, made where the step first asks for it. A variable's
    ordinary read is a snapshot made once, outside the loop, which would train on stale values without an
    error; inside a loop's step, this is that step's read, after the previous step's update (a worker's own
    variables: all-reduce's replicas, async's copies, given as `instead`, {a parameter's op name: the copy read
    in its place}). `of(variables)`: what the step's gradients are taken with respect to."""

    def __init__(self, instead=None):
        self._values = {}
        self._instead = instead or {}

    def __call__(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        if not isinstance(variable, tf.Variable):  # a PartitionedVariable: pieces on several servers (placement.py)
            return tf.concat([self._read(piece) for piece in variable], axis=0)
        return self._read(variable)

    def _read(self, variable):
        variable = self._instead.get(variable.op.name, variable)
        if variable.op.name not in self._values:
            self._values[variable.op.name] = variable.read_value()
        return self._values[variable.op.name]

    def of(self, variables):
        return [self._values[variable.op.name] for variable in variables]


def seed_everything(seed):
    """Fixes Python's, numpy's and the default graph's seeds; call before data or variables exist."""
    import numpy as np  # here, not at the top: the launcher imports this module and must stay single-threaded

    random.seed(seed)
    np.random.seed(seed)
    tf.set_random_seed(seed)


def mean_cross_entropy(labels, logits):
    """The recipes' loss: mean softmax cross-entropy over the fed examples; with portable kernels its gradient in
    IEEE operations (exact_math.py), TensorFlow's own with TensorFlow's kernels."""
    if products.tensorflows():
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return tf.reduce_mean(exact_math.sparse_softmax_cross_entropy(labels, logits))


def trainable_shapes(recipe, feature_shape, num_classes):
    """The shape of each trainable variable of `recipe`'s model on examples of `feature_shape`, from a graph
    built and thrown away: what the checks that need the model read, before any task starts."""
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, (None, *feature_shape))
        model_on(recipe, features, tf.placeholder(tf.int64, (None,)), num_classes)
        return [v.shape.as_list() for v in tf.trainable_variables()]


def build_model(recipe, dataset, custom_getter=None, split_over=0):
    """Placeholders for one slice of a batch, the recipe's logits, and the recipe's loss on them; with
    `split_over` pieces, its large variables cut into that many, placed over the servers (placement.py).

    The loss is a mean over the slice, so the average of N equal slices' gradients is the
    gradient of the global batch's mean loss: no learning-rate rescaling.
    """
    features = tf.placeholder(tf.float32, (None,) + dataset.feature_shape, name="features")
    labels = tf.placeholder(tf.int64, (None,), name="labels")
    return model_on(recipe, features, labels, dataset.num_classes, custom_getter, split_over=split_over)


def model_on(recipe, features, labels, num_classes, custom_getter=None, reuse=None, split_over=0):
    """The recipe's model, loss and accuracy on given `features` and `labels` tensors."""
    with tf.variable_scope("model", custom_getter=_reading(custom_getter, _making(split_over)), reuse=reuse):
        logits = recipe.model_fn(features, num_classes)
    loss = recipe.loss_fn(labels, logits)
    correct = tf.equal(tf.argmax(logits, axis=1), labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    return ModelGraph(features, labels, loss, accuracy, num_classes, custom_getter, split_over)


def worker_gradients(recipe, model, microbatches_per_worker, variables):
    """This worker's gradients, one list per microbatch: of its whole shard when it has one."""
    if microbatches_per_worker == 1:
        return [tf.gradients(model.loss, variables)]
    return microbatch_gradients(recipe, model, microbatches_per_worker, variables)


def microbatch_gradients(recipe, model, count, variables):
    """Gradients of each of `count` equal slices of the fed batch, one list per slice.

    Each slice gets a forward and backward pass of its own (the model's variables, reused and read as
    the model reads them), so a slice's arithmetic has the same shapes however many slices a worker is
    fed together.
    """
    gradients = []
    for features, labels in zip_strict(tf.split(model.features, count), tf.split(model.labels, count)):
        on_slice = model.on(recipe, features, labels)
        gradients.append(tf.gradients(on_slice.loss, variables))
    return gradients


def _making(split_over):
    """The custom getter that makes each of the model's variables: its initial values seeded by its name
    (initial_values.py), and large ones in `split_over` pieces over the servers (placement.py)."""
    partitioner = pieces_over(split_over)

    def make(getter, name, *args, **kwargs):
        kwargs["initializer"] = seeded(kwargs.get("initializer"), name)
        if split_by(partitioner, kwargs.get("shape"), kwargs.get("dtype")):
            kwargs.update(partitioner=partitioner, initializer=whole_then_sliced(kwargs["initializer"]))
        return getter(name, *args, **kwargs)

    return make


def _reading(reads, make):
    """The custom getter that makes (or finds) each variable through `make`, then reads it through `reads`."""
    if reads is None:
        return make
    return lambda getter, *args, **kwargs: reads(lambda *a, **k: make(getter, *a, **k), *args, **kwargs)


def build_model_on_copies(recipe, dataset, copy_device, collections):
    """The model, computing on a copy of each parameter kept on `copy_device`.

    Returns (model, [(parameter, copy), ...]). The parameters are created as in `build_model`
    (placed by the device setter, trainable, saved); the forward pass reads the copies instead, so
    a worker (async) or a group (hierarchical) trains on a snapshot it refreshes when it chooses.
    Copies start as their parameter's value and are in `collections`, never trainable.
    """
    pairs = []

    def compute_on_a_copy(getter, name, *args, **kwargs):
        parameter = getter(name, *args, **kwargs)
        copy = copy_of(parameter, copy_device, collections)
        pairs.append((parameter, copy))
        return copy

    return build_model(recipe, dataset, custom_getter=compute_on_a_copy), pairs


def copy_of(parameter, device, collections):
    """A copy of `parameter` on `device`, never trainable, in `collections`, that starts as its value when
    initialised (a local variable: when its worker joins, after the parameters are initialised or restored)."""
    with tf.device(device):
        name = parameter.op.name.split("/")[-1] + "_copy"
        return tf.Variable(parameter.read_value(), trainable=False, collections=collections, name=name)


def build_held_out(recipe, dataset):
    """The model once more, on the held-out split, reading the parameters themselves: the variables the
    model's get_variable calls made, wherever the mode computes (on copies: async, hierarchical, local
    SGD, EASGD). Evaluating it reads the parameters and changes nothing a worker trains with."""
    variables = tf.global_variables()

    def the_parameter(getter, name, *args, **kwargs):
        return whole(name, variables)

    with tf.name_scope("held_out"):
        return build_model(recipe, dataset, custom_getter=the_parameter)


def refresh_copies(pairs, after=()):
    """The op that sets every copy to its parameter's value, read once ops `after` have run: each read
    waits where its parameter is, and the copies only take the values, so no control edge crosses."""
    values = []
    for parameter, _ in pairs:
        with tf.colocate_with(parameter), tf.control_dependencies(after):
            values.append(parameter.read_value())
    return tf.group(*[copy.assign(value) for (_, copy), value in zip_strict(pairs, values)])
