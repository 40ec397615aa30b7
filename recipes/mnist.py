"""MNIST-style digit classification with a small MLP, in any mode of parallel_tf.

Default data: scikit-learn's bundled 8x8 digits (offline). With --data_dir: the MNIST idx files.

    # one plain process (the reference)
    python recipes/mnist.py
    # a cluster by hand: one terminal per task
    python recipes/mnist.py --job_name=ps --task_index=0 --cluster_spec=cluster_specs/local_1ps_2w.json
    python recipes/mnist.py --job_name=worker --task_index=0 --cluster_spec=cluster_specs/local_1ps_2w.json
    python recipes/mnist.py --job_name=worker --task_index=1 --cluster_spec=cluster_specs/local_1ps_2w.json
    # or all of it at once
    ./run_local_cluster.sh --num_workers=2
"""

from parallel_tf import datasets, task
from parallel_tf.compat import tf
from parallel_tf.layers import dense


def model(images, num_classes):
    hidden = dense(images, 128, "hidden", activation=tf.nn.relu)
    return dense(hidden, num_classes, "logits")


def load_data(settings):
    return datasets.mnist_idx(settings.data_dir) if settings.data_dir else datasets.digits(settings.seed)


if __name__ == "__main__":
    task.run(task.Recipe(name="mnist", model_fn=model, load_data=load_data))
