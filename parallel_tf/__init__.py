"""parallel_tf: controlled, reproducible parameter-server training in TensorFlow's graph mode."""

__version__ = "0.1.0"
