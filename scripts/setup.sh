#!/usr/bin/env bash
# Installs what is missing and starts the services Mosoo needs, on Debian/Ubuntu as root.
#   scripts/setup.sh run   -> what `make run` needs (Redis, Docker, bubblewrap, bun, the venv)
#   scripts/setup.sh test  -> the same, plus Chromium and PostgreSQL with a test database
set -euo pipefail
mode="${1:-run}"
cd "$(dirname "$0")/.."
root="$(pwd)"
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }
mkdir -p data/log

# --- system packages -------------------------------------------------------------------
need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v redis-server >/dev/null || need+=(redis-server)
command -v dockerd >/dev/null || need+=(docker.io)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v debootstrap >/dev/null || need+=(debootstrap)  # the sandbox base image, offline
command -v npm >/dev/null || need+=(npm)
command -v git >/dev/null || need+=(git)
command -v curl >/dev/null || need+=(curl)
if [ "$mode" = test ]; then
  [ -x /usr/bin/chromium-headless-shell ] || need+=(chromium-headless-shell)
  # The browser tests build a small preload library for Chromium (tests/support/no_netlink.c).
  command -v gcc >/dev/null || need+=(gcc)
  [ -e /usr/include/linux/netlink.h ] || need+=(libc6-dev linux-libc-dev)
  command -v pg_ctlcluster >/dev/null || need+=(postgresql)
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! command -v bun >/dev/null; then
  log "installing bun (the console build uses it)"
  npm install -g bun >/dev/null 2>&1
fi

# --- Python environment ----------------------------------------------------------------
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "Mosoo needs Python 3.11 or newer" >&2; exit 1; }
# What runs is requirements.lock; what tests is requirements-dev.lock (the runtime set plus the
# dev tools). Both are compiled from pyproject.toml with hashes by `make lock`, and pip checks
# every file it installs against them. The stamp names the set installed and the inputs it came
# from: a change to either lock or to pyproject.toml reinstalls, a run-only venv gets the dev set
# on `make test`, and a test venv already holds everything `make run` needs.
lock=requirements.lock
[ "$mode" = test ] && lock=requirements-dev.lock
inputs="$(cat requirements.lock requirements-dev.lock pyproject.toml | sha256sum | cut -c1-16)"
stamp=".venv/.installed-$mode-$inputs"
if [ ! -f "$stamp" ] && ! { [ "$mode" = run ] && [ -f ".venv/.installed-test-$inputs" ]; }; then
  log "installing the virtualenv (.venv) from $lock"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # pip's own chatter goes to a log; it is printed only when the install fails.
  { .venv/bin/pip install -q --upgrade pip \
      && .venv/bin/pip install -q --require-hashes -r "$lock" \
      && .venv/bin/pip install -q --no-deps -e . ; } >data/log/pip.log 2>&1 \
    || { tail -n 40 data/log/pip.log >&2; exit 1; }
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# --- services --------------------------------------------------------------------------
if ! redis-cli -p 6379 ping >/dev/null 2>&1; then
  log "starting redis-server on 127.0.0.1:6379"
  # 64 databases: each parallel test worker takes 16 (tests/support/redis_db.py).
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --databases 64 --logfile "$root/data/log/redis.log"
fi
if ! docker info >/dev/null 2>&1; then
  log "starting the Docker engine"
  (setsid dockerd >"$root/data/log/dockerd.log" 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || log "warning: the Docker engine did not start (see data/log/dockerd.log)"
fi

if docker info >/dev/null 2>&1; then
  # Cached by content: instant when the driver has not changed (about a minute the first time).
  log "sandbox image"
  .venv/bin/mosoo sandbox build-image >data/log/sandbox-image.log 2>&1 \
    || { tail -n 30 data/log/sandbox-image.log >&2; log "warning: the sandbox image did not build"; }
fi

if [ "$mode" = test ]; then
  version="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)"
  if [ -z "$version" ]; then
    version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
    pg_createcluster "$version" main >/dev/null
  fi
  if ! pg_lsclusters -h | awk -v v="$version" '$1==v && $2=="main" {print $4}' | grep -q online; then
    log "starting PostgreSQL $version"
    pg_ctlcluster "$version" main start
  fi
  for _ in $(seq 1 30); do su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break; sleep 1; done
  su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname='mosoo'\"" | grep -q 1 \
    || su postgres -c "psql -qc \"create role mosoo login password 'mosoo'\""
  # Each parallel test worker creates its own database (mosoo_test_gw0, ...: tests/support/workers.py).
  su postgres -c "psql -qAtc \"select rolcreatedb from pg_roles where rolname='mosoo'\"" | grep -q t \
    || su postgres -c "psql -qc 'alter role mosoo createdb'"
  su postgres -c "psql -qAtc \"select 1 from pg_database where datname='mosoo_test'\"" | grep -q 1 \
    || su postgres -c "psql -qc 'create database mosoo_test owner mosoo'"
  # Real third-party peers the tests run, installed here (from the npm registry, pinned) so a
  # test run itself talks only to loopback.
  everything="data/test-tools/server-everything"
  everything_version="2026.8.31"
  if [ ! -f "$everything/.installed-$everything_version" ]; then
    log "installing @modelcontextprotocol/server-everything $everything_version (an MCP peer for the tests)"
    rm -rf "$everything" && mkdir -p "$everything"
    npm install --no-audit --no-fund --prefix "$everything" \
      "@modelcontextprotocol/server-everything@$everything_version" >data/log/test-tools.log 2>&1 \
      || { tail -n 30 data/log/test-tools.log >&2; exit 1; }
    touch "$everything/.installed-$everything_version"
  fi
fi
log "ready"
