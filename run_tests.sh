#!/usr/bin/env bash
# Lints (ruff, import-linter), checks the types (mypy), builds the manual (mkdocs) and runs the test suite, real multi-process
# clusters included; sets up .venv on first use. With arguments, one pytest run of them instead: ./run_tests.sh -k sharder
# PARALLEL_TF_TENSORFLOW=1.15 runs the tests on TensorFlow 1.15 in .venv-tf1.15 (Python 3.7), without the lint and
# the manual, which do not depend on TensorFlow's version.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO/scripts/ensure_venv.sh"
cd "$REPO"
if [ "${PARALLEL_TF_TENSORFLOW:-2}" = 2 ]; then
  ensure_venv dev
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check .
  # The import layers and no circles (.importlinter).
  "$VENV/bin/lint-imports" --no-logo --no-cache
  # The types (pyproject.toml's [tool.mypy]): a technique or codec short of its Protocol fails here.
  "$VENV/bin/mypy" --no-error-summary
  # The manual (docs/, mkdocs.yml): a broken link, anchor or page fails.
  "$VENV/bin/mkdocs" build --strict --quiet
else
  ensure_venv test
fi
# pytest exits 5 when it collects no tests; set -e turns that into a failure, never a silent pass.
if [ $# -gt 0 ]; then exec "$VENV/bin/python" -m pytest "$@"; fi
# The whole suite, in two passes. The tests that start no processes are mostly Python building graphs, a core's
# work: two xdist workers run them, a file each at a time (pyproject.toml's --dist loadfile). Then those that start
# processes (marked `cluster`), in one process: one cluster at a time, with nothing else on the cores, as their
# timings need. Both passes run; the first that fails gives the exit status.
status=0
"$VENV/bin/python" -m pytest -m "not cluster" -n 2 || status=$?
"$VENV/bin/python" -m pytest -m cluster || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
