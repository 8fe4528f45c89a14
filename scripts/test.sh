#!/usr/bin/env bash
# The whole suite: lint, types, import contracts, then every test on SQLite and PostgreSQL
# (the real-stack journeys once, on PostgreSQL: see tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export MOSOO_TEST_DATABASES="${MOSOO_TEST_DATABASES:-sqlite,postgresql}"
export REFLEX_USE_SYSTEM_BUN=1 REFLEX_TELEMETRY_ENABLED=false
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; echo "run .venv/bin/ruff format ." >&2; exit 1; }
.venv/bin/mypy
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
# pytest's 5 means no test ran: a failure for us.
if [ "$status" -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi
exit "$status"
