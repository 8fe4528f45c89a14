#!/usr/bin/env bash
# The fast loop: lint, types and every test that needs no real stack (no Mosoo processes,
# Docker sandboxes or Chromium), on SQLite. Redis must be running (scripts/setup.sh starts it).
set -euo pipefail
cd "$(dirname "$0")/.."
export MOSOO_TEST_DATABASES=sqlite REFLEX_USE_SYSTEM_BUN=1 REFLEX_TELEMETRY_ENABLED=false
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; echo "run .venv/bin/ruff format ." >&2; exit 1; }
.venv/bin/mypy
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
set +e
.venv/bin/python -m pytest -p no:cacheprovider -q -m "not integration and not browser" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi
exit "$status"
