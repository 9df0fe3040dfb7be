#!/usr/bin/env bash
# Runs a command with a throw-away PostgreSQL 15 and Redis on 127.0.0.1, then stops them.
# Exports DB=postgres, DB_HOST, DB_PORT, DB_NAME, DB_USER and REDIS_URL for the command.
# PostgreSQL refuses to run as root, so it runs as the unprivileged user "postgres".
set -euo pipefail

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

work=$(mktemp -d /tmp/langbite-services.XXXXXX)
chmod 755 "$work"
pg_dir="$work/pg"
pg_port=$(free_port)
redis_port=$(free_port)

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cleanup() {
  as_pg pg_ctl -D "$pg_dir" -m immediate stop >/dev/null 2>&1 || true
  [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi
mkdir -p "$pg_dir"
[ "$(id -u)" = 0 ] && chown postgres "$pg_dir"
as_pg initdb -D "$pg_dir" -A trust -U postgres --no-sync >"$work/initdb.log" 2>&1 \
  || { cat "$work/initdb.log"; exit 1; }
as_pg pg_ctl -D "$pg_dir" -w -l "$pg_dir/server.log" \
  -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start >/dev/null \
  || { cat "$pg_dir/server.log"; exit 1; }

redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --dir "$work" --pidfile "$work/redis.pid" --logfile "$work/redis.log" >/dev/null
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

export DB=postgres DB_HOST=127.0.0.1 DB_PORT="$pg_port" DB_USER=postgres DB_NAME=langbite
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
createdb -h 127.0.0.1 -p "$pg_port" -U postgres langbite

"$@"
