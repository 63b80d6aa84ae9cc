# shellcheck shell=bash
# pm2 for pmw: the pinned binary from tools/pm2 with a private PM2_HOME (default in the stack
# dir), so the project's pm2 never touches another pm2 on the host.
PMW_PM2_BIN="$ROOT/tools/pm2/node_modules/.bin/pm2"
export PM2_HOME="${PM2_HOME:-$PMW_STACK_DIR/pm2}"

pm2_cmd() { "$PMW_PM2_BIN" "$@"; }

# The instance (push-a/push-b) that leads slot 0 now, from push_epoch.
push_leader() {
  "$PMW_PG_BIN/psql" -X -qAt "$PMW_POSTGRES_URL" -c "SELECT leader FROM push_epoch WHERE slot = 0" 2>/dev/null
}

# Wait until `instance` has a fresh heartbeat with role $2 (standby/leader), up to $3 seconds.
wait_push_role() {
  local instance="$1" role="$2" secs="${3:-60}" since="$4" i
  for i in $(seq 1 $((secs * 10))); do
    if [ "$("$PMW_PG_BIN/psql" -X -qAt "$PMW_POSTGRES_URL" -c \
      "SELECT state->>'role' FROM heartbeats WHERE service = 'pmw-push' AND instance = '$instance' AND beat_ms >= $since" 2>/dev/null)" = "$role" ]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# The revision a build from this checkout carries (PMW_REVISION, see crates/core/src/build_info.rs).
checkout_revision() {
  git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown
}

# Wait until every instance of <service> that beat after <since_ms> reports <revision>, and at
# least one did: a restarted service really runs the new build (not an old binary left behind).
# With <instance>, only that instance, and only a process of it started after <since_ms>.
#   wait_revision <service> <revision> <secs> <since_ms> [instance]
wait_revision() {
  local service="$1" rev="$2" secs="${3:-60}" since="$4" instance="${5:-}" i got only=""
  [ -z "$instance" ] || only="AND instance = '$instance' AND started_ms >= $since"
  for i in $(seq 1 $((secs * 10))); do
    got="$("$PMW_PG_BIN/psql" -X -qAt "$PMW_POSTGRES_URL" -c \
      "SELECT string_agg(DISTINCT coalesce(state->>'revision', 'unknown'), ',') FROM heartbeats WHERE service = '$service' AND beat_ms >= $since $only" 2>/dev/null || true)"
    if [ "$got" = "$rev" ]; then
      return 0
    fi
    sleep 0.1
  done
  log "$service reports revision '${got:-none}', expected $rev"
  return 1
}
