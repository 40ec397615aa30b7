#!/usr/bin/env bash
# Lints (ruff, import-linter), builds the manual (mkdocs) and runs the test suite, real multi-process
# clusters included; sets up .venv on first use. Extra arguments go to pytest, e.g. ./run_tests.sh -k sharder
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO/scripts/ensure_venv.sh"
ensure_venv dev
cd "$REPO"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The import layers and no circles (.importlinter).
.venv/bin/lint-imports --no-logo --no-cache
# The manual (docs/, mkdocs.yml): a broken link, anchor or page fails.
.venv/bin/mkdocs build --strict --quiet
# pytest exits 5 when it collects no tests; set -e turns that into a failure, never a silent pass.
exec .venv/bin/python -m pytest "$@"
