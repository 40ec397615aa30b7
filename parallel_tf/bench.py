"""`python -m parallel_tf.bench`: benchmarks the modes against TensorFlow's own strategies (tools/bench.py)."""

from parallel_tf.tools import bench

if __name__ == "__main__":
    bench.run_command_line()
