"""parallel_tf: TensorFlow 1.x-style parameter-server training recipes (graph mode, tf.compat.v1)."""

from setuptools import find_packages, setup

# TensorFlow is bounded to the versions tested (2.21): a release that drops compat.v1 pieces
# must not break an install silently. TF 1.15 support rests on API discipline, untested here.
TENSORFLOW = ">=2.21,<2.22"

setup(
    name="parallel_tf",
    version="0.1.0",
    description="Controlled, reproducible parameter-server training in TensorFlow's graph mode",
    packages=find_packages(include=["parallel_tf", "parallel_tf.*"]),
    python_requires=">=3.10",
    install_requires=["numpy", "absl-py", "scikit-learn", "matplotlib"],
    extras_require={
        "cpu": [f"tensorflow-cpu{TENSORFLOW}"],
        "gpu": [f"tensorflow{TENSORFLOW}"],
        "dev": ["pytest>=7", "pytest-timeout", "ruff", "jsonschema"],
    },
)
