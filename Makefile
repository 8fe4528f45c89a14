# The two commands of the quick start: `make run` and `make test`.
SHELL := /bin/bash
export REFLEX_USE_SYSTEM_BUN := 1
export REFLEX_TELEMETRY_ENABLED := false

.PHONY: run test check lint lock bench

run:
	@scripts/setup.sh run
	@.venv/bin/mosoo up

test:
	@scripts/setup.sh test
	@scripts/test.sh

# The fast loop (under 3 minutes): lint, types and the tests that need no real stack, on SQLite.
check:
	@scripts/check.sh

lint:
	.venv/bin/ruff check .
	.venv/bin/mypy
	.venv/bin/lint-imports

lock:
	.venv/bin/pip freeze --exclude-editable | grep -v '^-e ' > requirements.lock
