"""The local launcher (`python -m parallel_tf.launch`): a recipe's cluster as processes on this
machine, fenced off from the network, optionally spread over simulated hosts, restarted when asked."""
