"""The part of the graph every mode shares: inputs, the recipe's model, loss, accuracy, optimizer.

Every mode, and the single-process reference run, builds its model through `build_model` as
the first thing in a fresh graph with the same seed, so op-level seeds (derived by TF from the
graph seed and op ids) and therefore initial parameters are identical everywhere.
"""

import dataclasses
import random

import numpy as np

from parallel_tf.compat import tf

OPTIMIZERS = {
    "sgd": lambda lr: tf.train.GradientDescentOptimizer(lr),
    "momentum": lambda lr: tf.train.MomentumOptimizer(lr, momentum=0.9),
    "adagrad": lambda lr: tf.train.AdagradOptimizer(lr),
    "adam": lambda lr: tf.train.AdamOptimizer(lr),
}


@dataclasses.dataclass(frozen=True)
class ModelGraph:
    features: tf.Tensor
    labels: tf.Tensor
    loss: tf.Tensor  # mean cross-entropy over the fed examples
    accuracy: tf.Tensor  # fraction of the fed examples classified correctly


def seed_everything(seed):
    """Fixes Python's, numpy's and the default graph's seeds; call before data or variables exist."""
    random.seed(seed)
    np.random.seed(seed)
    tf.set_random_seed(seed)


def build_model(model_fn, dataset):
    """Placeholders for one slice of a batch, the recipe's logits, and the loss on them.

    The loss is a mean over the slice, so SyncReplicasOptimizer's average of N equal slices'
    gradients is the gradient of the global batch's mean loss: no learning-rate rescaling.
    """
    features = tf.placeholder(tf.float32, (None,) + dataset.feature_shape, name="features")
    labels = tf.placeholder(tf.int64, (None,), name="labels")
    with tf.variable_scope("model"):
        logits = model_fn(features, dataset.num_classes)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    correct = tf.equal(tf.argmax(logits, axis=1), labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    return ModelGraph(features, labels, loss, accuracy)


def make_optimizer(name, learning_rate):
    return OPTIMIZERS[name](learning_rate)
