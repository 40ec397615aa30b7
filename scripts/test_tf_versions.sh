#!/usr/bin/env bash
# Runs the tests that start no cluster processes (arithmetic, equalities, promises, units: everything
# not marked `cluster`) on other TensorFlow versions, to back the bounds in setup.py. Each version gets
# a fresh virtualenv (a reused one keeps packages an earlier version pulled in: jax broke 2.13's
# import); logs stay in .venv-tf-matrix/. The last lines say how each did.
# Usage: scripts/test_tf_versions.sh 2.12.1 2.16.2 2.20.0
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOGS="$REPO/.venv-tf-matrix"
VENV="$LOGS/venv"
[ $# -gt 0 ] || { echo "usage: $0 VERSION [VERSION ...]  (tensorflow-cpu versions, e.g. 2.12.1)" >&2; exit 2; }
mkdir -p "$LOGS"
results=()
for version in "$@"; do
  echo "== tensorflow-cpu $version"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV" || exit 1
  if ! "$VENV/bin/python" -m pip install -q "tensorflow-cpu==$version" -e "$REPO[dev]" >"$LOGS/install-$version.log" 2>&1; then
    tail -n 5 "$LOGS/install-$version.log"
    results+=("$version: install failed ($LOGS/install-$version.log)")
    continue
  fi
  summary=$(cd "$REPO" && "$VENV/bin/python" -m pytest -m "not cluster" -q -p no:cacheprovider -p no:warnings 2>&1 |
    tee "$LOGS/tests-$version.log" | grep -E "[0-9]+ (passed|failed|error)" | tail -n 1)  # TF may print after it
  echo "$summary"
  results+=("$version: $summary")
done
rm -rf "$VENV"
printf '%s\n' "${results[@]}"
