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
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

# Recompiles both lock files from pyproject.toml, with the sha256 of every file of each pinned
# version (scripts/setup.sh installs them with --require-hashes): requirements.lock is
# [project].dependencies (make run), requirements-dev.lock adds the dev extra under the runtime
# pins (make test). Pins that still fit are kept; move them with
# `make lock LOCK_FLAGS=--upgrade` or `LOCK_FLAGS="--upgrade-package NAME"`. It runs, with uv
# installed into a throwaway venv (not .venv):
#   uv pip compile pyproject.toml --no-config --universal --python-version 3.11 \
#     --generate-hashes -o requirements.lock
#   uv pip compile pyproject.toml --extra dev -c requirements.lock --no-config --universal \
#     --python-version 3.11 --generate-hashes -o requirements-dev.lock
# uv never reads pip.conf or PIP_* settings, and --no-config keeps it from uv.toml files too, so
# a machine's local indexes or wheel folders never put their own builds' hashes in the locks.
UV_VERSION := 0.13.8
lock:
	@tools="$$(mktemp -d)"; trap 'rm -rf "$$tools"' EXIT; \
	python3 -m venv "$$tools" && "$$tools/bin/pip" install -q uv==$(UV_VERSION) \
	&& export UV_CUSTOM_COMPILE_COMMAND="make lock" \
	&& compile=("$$tools/bin/uv" pip compile pyproject.toml --no-config --universal \
	            --python-version 3.11 --generate-hashes -q $(LOCK_FLAGS)) \
	&& "$${compile[@]}" -o requirements.lock \
	&& "$${compile[@]}" --extra dev -c requirements.lock -o requirements-dev.lock \
	&& echo "requirements.lock and requirements-dev.lock recompiled"
