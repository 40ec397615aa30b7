"""The one place that imports TensorFlow.

Everything else does `from parallel_tf.compat import tf` and gets the TF1 graph-mode API
(`tf.compat.v1` with v2 behaviour disabled), so the package runs the same on TF 1.15 and on
TF 2.x. TF's C++ start-up chatter is hidden unless the user asks for it, and oneDNN's custom kernels
are off by default: their results depend on computation order, which reproducibility studies
must control (set TF_ENABLE_ONEDNN_OPTS=1 to turn them back on).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as _tf  # noqa: E402

tf = _tf.compat.v1
tf.get_logger().setLevel("ERROR")
tf.disable_v2_behavior()

TF_VERSION = _tf.__version__
