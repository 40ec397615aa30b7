"""What runs many runs: the study, the benchmark and TensorFlow's own strategies it compares
with, and the TFJob manifest writer. Their command lines are parallel_tf/{study,bench,k8s}.py."""
