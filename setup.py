"""parallel_tf: TensorFlow 1.x-style parameter-server training recipes (graph mode, tf.compat.v1)."""

from setuptools import find_packages, setup

# TensorFlow is bounded to the versions tested: every minor release from 2.12 (the first with wheels
# for Python 3.11) to 2.21, the newest patch of each (README: TensorFlow versions), so a release that
# drops compat.v1 pieces cannot break an install silently; and 1.15.5, the card's, on Python 3.7, with what it
# needs pinned: protobuf 4, which plain pip picks, breaks its import, and it was built against numpy 1.18.
TENSORFLOW = ">=2.12,<2.22"
TENSORFLOW_1 = ["tensorflow==1.15.5", "protobuf<3.21", "numpy<1.19"]
TEST = ["pytest>=7", "pytest-timeout", "pytest-xdist", "jsonschema"]  # what the tests need on either line

setup(
    name="parallel_tf",
    version="0.1.0",
    description="Controlled, reproducible parameter-server training in TensorFlow's graph mode",
    packages=find_packages(include=["parallel_tf", "parallel_tf.*"]),
    # the portable kernels' sources, compiled on first use or by scripts/ensure_venv.sh (graph/portable_kernel.py)
    package_data={"parallel_tf": ["kernels/*.cc", "kernels/*.h"]},
    python_requires=">=3.7",
    # tensorboard: the chief writes summaries, and tensorflow-cpu (unlike tensorflow) does not bring it.
    # scipy: the study's intervals (scikit-learn depends on it too).
    # setproctitle: a task forked by the fork server names itself in `ps` (training/task.py).
    # typing_extensions: Protocol and TypedDict on Python 3.7 (backports.py).
    install_requires=[
        *("numpy", "absl-py", "scikit-learn", "scipy", "matplotlib", "tensorboard", "setproctitle"),
        "typing_extensions; python_version < '3.8'",
    ],
    extras_require={
        "cpu": [f"tensorflow-cpu{TENSORFLOW}"],
        "gpu": [f"tensorflow{TENSORFLOW}"],
        "tf115": TENSORFLOW_1,  # PARALLEL_TF_TENSORFLOW=1.15 (scripts/ensure_venv.sh)
        "test": TEST,
        "dev": [*TEST, "ruff", "import-linter", "mkdocs", "mypy"],
    },
)
