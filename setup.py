"""parallel_tf: TensorFlow 1.x-style parameter-server training recipes (graph mode, tf.compat.v1)."""

from setuptools import find_packages, setup

# TensorFlow is bounded to the versions tested: every minor release from 2.12 (the first with wheels
# for Python 3.11) to 2.21, the newest patch of each (README: TensorFlow versions), so a release that
# drops compat.v1 pieces cannot break an install silently. TF 1.15: tests/test_tf115_api.py.
TENSORFLOW = ">=2.12,<2.22"

setup(
    name="parallel_tf",
    version="0.1.0",
    description="Controlled, reproducible parameter-server training in TensorFlow's graph mode",
    packages=find_packages(include=["parallel_tf", "parallel_tf.*"]),
    # the portable kernels' sources, compiled on first use or by scripts/ensure_venv.sh (graph/portable_kernel.py)
    package_data={"parallel_tf": ["kernels/*.cc", "kernels/*.h"]},
    python_requires=">=3.10",
    # tensorboard: the chief writes summaries, and tensorflow-cpu (unlike tensorflow) does not bring it.
    # scipy: the study's intervals (scikit-learn depends on it too).
    # setproctitle: a task forked by the fork server names itself in `ps` (training/task.py).
    install_requires=["numpy", "absl-py", "scikit-learn", "scipy", "matplotlib", "tensorboard", "setproctitle"],
    extras_require={
        "cpu": [f"tensorflow-cpu{TENSORFLOW}"],
        "gpu": [f"tensorflow{TENSORFLOW}"],
        "dev": ["pytest>=7", "pytest-timeout", "pytest-xdist", "ruff", "jsonschema", "import-linter", "mkdocs"],
    },
)
