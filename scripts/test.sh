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

# pytest's 5 means no test ran: a failure for us.
pytest_status() { if [ "$1" -eq 5 ]; then echo "no tests ran" >&2; echo 1; else echo "$1"; fi; }

redis_databases() { redis-cli -p 6379 config get databases 2>/dev/null | sed -n 2p; }

# The whole suite on both databases runs as two passes at once: everything on PostgreSQL
# (the real-stack journeys included), and beside it the tests that need no real stack on
# SQLite (plus the journeys marked every_database): the same tests as one run on both, in
# less wall time, since the journeys mostly wait on processes and sandboxes. The SQLite pass
# uses Redis databases 16 and up (MOSOO_TEST_REDIS_DB_OFFSET), so it needs a Redis with 32
# (scripts/setup.sh starts one); otherwise, or when pytest arguments are given, one run.
if [ "$#" -eq 0 ] && [ "$MOSOO_TEST_DATABASES" = "sqlite,postgresql" ] \
  && [ "$(redis_databases || echo 0)" -ge 32 ] 2>/dev/null; then
  logs="$(mktemp -d)"
  set +e
  MOSOO_TEST_DATABASES=postgresql .venv/bin/python -m pytest -p no:cacheprovider \
    --basetemp="$logs/tmp-postgresql" >"$logs/postgresql.log" 2>&1 &
  postgresql=$!
  MOSOO_TEST_DATABASES=sqlite MOSOO_TEST_REDIS_DB_OFFSET=16 .venv/bin/python -m pytest \
    -p no:cacheprovider --basetemp="$logs/tmp-sqlite" \
    -m "not (integration or browser) or every_database" >"$logs/sqlite.log" 2>&1 &
  sqlite=$!
  wait "$postgresql"; first=$?
  wait "$sqlite"; second=$?
  set -e
  echo "=== PostgreSQL pass (every test)"; cat "$logs/postgresql.log"
  echo "=== SQLite pass (the tests that need no real stack, and the every_database journeys)"
  cat "$logs/sqlite.log"
  first="$(pytest_status "$first")"; second="$(pytest_status "$second")"
  if [ "$first" -ne 0 ]; then exit "$first"; fi
  exit "$second"
fi
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
exit "$(pytest_status "$status")"
