# What scripts/check.sh and scripts/test.sh share (sourced): the environment, the linters and
# pytest in parallel workers.
export REFLEX_USE_SYSTEM_BUN=1 REFLEX_TELEMETRY_ENABLED=false
# Keep compiled modules, and pytest's rewritten test modules, in __pycache__ (git ignores it):
# with PYTHONDONTWRITEBYTECODE set (as some machines do) every test process and every `mosoo`
# process a test starts compiled the whole code again.
unset PYTHONDONTWRITEBYTECODE

lint() {
  .venv/bin/ruff check .
  .venv/bin/ruff format --check . >/dev/null \
    || { .venv/bin/ruff format --check .; echo "run .venv/bin/ruff format ." >&2; exit 1; }
  .venv/bin/mypy
  .venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
}

# How many pytest-xdist workers: MOSOO_TEST_WORKERS, else $1; no more than Redis has databases
# for (each worker takes 16 above MOSOO_TEST_REDIS_DB_OFFSET: tests/support/redis_db.py).
pytest_workers() {
  local wanted="${MOSOO_TEST_WORKERS:-$1}" databases fit
  databases="$(redis-cli -p 6379 config get databases 2>/dev/null | sed -n 2p)"
  fit=$(( (${databases:-16} - ${MOSOO_TEST_REDIS_DB_OFFSET:-0}) / 16 ))
  if [ "$wanted" -gt "$fit" ]; then
    echo "Redis has ${databases:-16} databases, enough for $fit test worker(s), not $wanted" \
      "(scripts/setup.sh starts it with 64)" >&2
    wanted=$fit
  fi
  echo "$(( wanted < 1 ? 1 : wanted ))"
}

# pytest with the given workers (1: no xdist), then the arguments; pytest's 5 (no test ran)
# is a failure for us.
run_pytest() {
  local workers="$1" status
  shift
  local parallel=()
  [ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadscope)
  set +e
  # --durations: the 25 slowest tests close every run, where the suite's time goes.
  .venv/bin/python -m pytest -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
  status=$?
  set -e
  if [ "$status" -eq 5 ]; then echo "no tests ran" >&2; return 1; fi
  return "$status"
}
