"""CIFAR-10 with a small CNN (conv-pool-conv-pool-dense), in any mode of parallel_tf.

    ./run_local_cluster.sh --recipe=cifar10 --data_dir=data/cifar10 --download
    ./run_local_cluster.sh --recipe=cifar10 --dataset=synthetic --train_steps=50
    python recipes/cifar10.py --data_dir=data/cifar10 --augment     # one plain process

--data_dir holds cifar-10-batches-py/ or cifar-10-python.tar.gz. --augment adds random crops
and flips drawn from the seed and the step, so sync training stays deterministic.
"""

from absl import flags

from parallel_tf.compat import tf
from parallel_tf.data import datasets
from parallel_tf.data.sharding import random_crop_and_flip
from parallel_tf.graph.layers import conv2d, dense, flatten, max_pool, standardize
from parallel_tf.training import task

flags.DEFINE_bool("augment", False, "Random 4-pixel crops and left-right flips of training images.")


def model(images, num_classes):
    x = standardize(images)
    x = max_pool(conv2d(x, 32, 3, "conv1"))
    x = max_pool(conv2d(x, 64, 3, "conv2"))
    x = dense(flatten(x), 128, "hidden", activation=tf.nn.relu)
    return dense(x, num_classes, "logits")


def augment(images, step, positions, settings):
    if not flags.FLAGS.augment:
        return images
    return random_crop_and_flip(images, step, positions, settings.global_batch_size, settings.seed)


RECIPE = task.Recipe(
    name="cifar10",
    model_fn=model,
    datasets={"cifar10": datasets.cifar10, "synthetic": datasets.synthetic_cifar10},
    augment=augment,
)

if __name__ == "__main__":
    task.run(RECIPE)
