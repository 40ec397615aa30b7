"""`python -m parallel_tf.k8s`: writes a Kubeflow TFJob manifest for a recipe's cluster (tools/k8s.py)."""

from parallel_tf.tools import k8s

if __name__ == "__main__":
    k8s.run_command_line()
