"""MNIST-style digit classification, a small MLP or CNN, in any mode of parallel_tf.

Default data: scikit-learn's bundled 8x8 digits (offline). --dataset=mnist --data_dir=DIR reads
the MNIST idx files (add --download to fetch them). --model=cnn for the convolutional net.

    # one plain process (the reference)
    python recipes/mnist.py
    # a cluster by hand: one terminal per task
    python recipes/mnist.py --job_name=ps --task_index=0 --cluster_spec=cluster_specs/local_1ps_2w.json
    python recipes/mnist.py --job_name=worker --task_index=0 --cluster_spec=cluster_specs/local_1ps_2w.json
    python recipes/mnist.py --job_name=worker --task_index=1 --cluster_spec=cluster_specs/local_1ps_2w.json
    # or all of it at once
    ./run_local_cluster.sh --num_workers=2
"""

from absl import flags

from parallel_tf.backports import isqrt
from parallel_tf.compat import tf
from parallel_tf.data import datasets
from parallel_tf.graph.layers import conv2d, dense, flatten, max_pool
from parallel_tf.training import task

flags.DEFINE_enum("model", "mlp", ["mlp", "cnn"], "Fully connected net or convolutional net.")


def mlp(images, num_classes):
    hidden = dense(images, 128, "hidden", activation=tf.nn.relu)
    return dense(hidden, num_classes, "logits")


def cnn(images, num_classes):
    side = isqrt(int(images.shape[-1]))  # 8 for digits, 28 for MNIST
    x = tf.reshape(images, [-1, side, side, 1])
    x = max_pool(conv2d(x, 16, 3, "conv1"))
    x = max_pool(conv2d(x, 32, 3, "conv2"))
    x = dense(flatten(x), 64, "hidden", activation=tf.nn.relu)
    return dense(x, num_classes, "logits")


def model(images, num_classes):
    return {"mlp": mlp, "cnn": cnn}[flags.FLAGS.model](images, num_classes)


RECIPE = task.Recipe(name="mnist", model_fn=model, datasets={"digits": datasets.digits, "mnist": datasets.mnist})

if __name__ == "__main__":
    task.run(RECIPE)
