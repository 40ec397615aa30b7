"""Datasets as numpy arrays (digits, MNIST, CIFAR-10, with the MNIST download) and the
deterministic sharder that gives worker i its slice of global batch t. Free of TensorFlow."""
