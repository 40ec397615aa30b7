#!/usr/bin/env bash
# Starts a local TensorFlow cluster (1 ps + 2 workers, sync mode, digits by default) and trains.
# Sets up .venv on first use (PARALLEL_TF_TENSORFLOW=1.15: .venv-tf1.15, on TensorFlow 1.15 and Python 3.7).
# Options: python -m parallel_tf.launch --help; examples in README.md.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO/scripts/ensure_venv.sh"
ensure_venv
exec "$VENV/bin/python" -m parallel_tf.launch "$@"
