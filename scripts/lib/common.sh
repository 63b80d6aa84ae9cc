# shellcheck shell=bash disable=SC2034 # vars are used by the scripts that source this
# Shared helpers for scripts/install and scripts/stack. Source it; it does not
# change shell options, so it is safe under `set -euo pipefail`.

# Repo root, from this file's location (scripts/lib/common.sh).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Stack state lives outside the repo: a clone made by `mktemp -d` is 0700 and
# the postgres user must be able to traverse to its data dir.
PMW_STACK_DIR="${PMW_STACK_DIR:-/var/tmp/pmw-stack-$(id -un)}"

# Private ports (override by env).
PMW_PG_PORT="${PMW_PG_PORT:-55432}"
PMW_CH_HTTP_PORT="${PMW_CH_HTTP_PORT:-58123}"
PMW_CH_TCP_PORT="${PMW_CH_TCP_PORT:-59000}"
PMW_ANVIL_PORT="${PMW_ANVIL_PORT:-58545}"
# Polygon's chain id, pmw-live's default PMW_LIVE_CHAIN_ID (test anvils use it too).
PMW_ANVIL_CHAIN_ID="${PMW_ANVIL_CHAIN_ID:-137}"
# NATS JetStream (edge mode): three nodes, one cluster; per node a client, a cluster (route)
# and a monitoring (HTTP, /healthz) port, as space-separated lists of three.
PMW_NATS_PORTS="${PMW_NATS_PORTS:-54222 54223 54224}"
PMW_NATS_CLUSTER_PORTS="${PMW_NATS_CLUSTER_PORTS:-56222 56223 56224}"
PMW_NATS_HTTP_PORTS="${PMW_NATS_HTTP_PORTS:-58222 58223 58224}"

# Locations derived from the above.
PMW_PG_BIN="${PMW_PG_BIN:-/usr/lib/postgresql/15/bin}"
PMW_PG_DATA="$PMW_STACK_DIR/pg"            # owned by the postgres OS user when root
PMW_PG_SOCK="$PMW_STACK_DIR/pg-sock"       # unix socket dir
PMW_PG_LOG="$PMW_STACK_DIR/log/postgres.log"
PMW_CH_DIR="$PMW_STACK_DIR/ch"
# ClickHouse 18.16 writes ~2 files per column for every INSERT (no compact parts before 20.3);
# on this kind of VM disk that costs ~50 ms per small INSERT. The dev/test stack's data is
# disposable, so it lives in memory when /dev/shm is available (override with PMW_CH_DATA).
if [ -z "${PMW_CH_DATA:-}" ]; then
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    PMW_CH_DATA="/dev/shm/pmw-ch-$(id -un)"
  else
    PMW_CH_DATA="$PMW_CH_DIR/data"
  fi
fi
PMW_CH_LOG="$PMW_STACK_DIR/log/clickhouse.log"
PMW_ANVIL_LOG="$PMW_STACK_DIR/log/anvil.log"
PMW_NATS_DIR="$PMW_STACK_DIR/nats"          # per node: n<i>.conf, n<i>.pid, n<i>/ (file storage)
PMW_NODE_DIR="$ROOT/tools/node"
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"

# Progress and errors go to stderr.
log() { printf '[pmw] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as root: directly if we are root, else via sudo.
as_root() {
  if is_root; then "$@"; else sudo "$@"; fi
}

# OS user that owns and runs the Postgres cluster: initdb/postgres refuse root.
pg_os_user() {
  if is_root; then echo postgres; else id -un; fi
}

# Run a command as the Postgres OS user.
as_pg() {
  if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_ctl on our cluster, as the right user, e.g. `pg_ctl_cmd restart -m fast`.
# -l keeps the server's output in the log file on (re)start.
pg_ctl_cmd() {
  as_pg "$PMW_PG_BIN/pg_ctl" -D "$PMW_PG_DATA" -l "$PMW_PG_LOG" "$@"
}

# psql on our cluster over its unix socket (trust auth), as role pmw by default.
pg_psql() {
  "$PMW_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PMW_PG_SOCK" -p "$PMW_PG_PORT" "$@"
}

# The anvil binary from tools/node (npm @foundry-rs/anvil). Prefer the native
# binary of the platform package, so pids we record are anvil's own.
anvil_bin() {
  local arch native
  case "$(uname -m)" in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) arch='' ;;
  esac
  native="$PMW_NODE_DIR/node_modules/@foundry-rs/anvil-linux-$arch/bin/anvil"
  if [ -n "$arch" ] && [ -x "$native" ]; then
    echo "$native"
  else
    echo "$PMW_NODE_DIR/node_modules/.bin/anvil"
  fi
}

# Is something accepting TCP connections on 127.0.0.1:$1?
port_in_use() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# Print the last lines of a log file (for error messages).
log_tail() {
  local f="$1" n="${2:-30}"
  if [ -r "$f" ]; then
    log "--- last $n lines of $f ---"
    tail -n "$n" "$f" >&2 || true
  else
    log "(no log at $f)"
  fi
}
