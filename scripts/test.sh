#!/usr/bin/env bash
# The whole suite: lint, types, import contracts, then every test on SQLite and PostgreSQL
# (the real-stack journeys once, on PostgreSQL: see tests/conftest.py), in parallel workers
# (MOSOO_TEST_WORKERS, default 2; tests/support/scheduling.py says what goes where).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/suite.sh
export MOSOO_TEST_DATABASES="${MOSOO_TEST_DATABASES:-sqlite,postgresql}"
lint
run_pytest "$(pytest_workers 2)" "$@"
