#!/usr/bin/env bash
# The fast loop: lint, types and every test that needs no real stack (no Mosoo processes,
# Docker sandboxes or Chromium), on SQLite, in parallel workers (MOSOO_TEST_WORKERS, default
# 2: measured faster than 3 on 2 cores). Redis must be
# running (scripts/setup.sh starts it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/suite.sh
export MOSOO_TEST_DATABASES=sqlite
lint
run_pytest "$(pytest_workers 2)" -q -m "not integration and not browser" "$@"
