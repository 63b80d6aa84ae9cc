# shellcheck shell=bash disable=SC2034 # vars are used by the scripts that source this
# The opt-in Postgres HA stack (scripts/stack up|down|status|wait|env ha): a 3-member etcd 3.4 and
# two Patroni 3.0 members running Postgres 15 (a primary and a synchronous standby), from the
# templates in deploy/patroni/, on ports and a state dir of their own ($PMW_HA_DIR). It never
# touches the single-node stack. Sourced by scripts/stack after lib/common.sh; uses its helpers
# (spawn, live_pid, stop_pidfile, wait_for, require_free_port, pid_alive).

PMW_HA_DIR="${PMW_HA_DIR:-/var/tmp/pmw-ha-$(id -un)}"
PMW_HA_SCOPE="${PMW_HA_SCOPE:-pmw-ha}"
# Per member, space-separated: etcd client and peer ports, Postgres and Patroni REST ports. All
# below Linux's ephemeral range (32768-60999 by default): this stack starts in the middle of
# `scripts/test`, when thousands of outgoing connections hold ephemeral ports, and a fixed port
# inside that range was once taken by one of them (etcd: "bind: address already in use").
PMW_HA_ETCD_PORTS="${PMW_HA_ETCD_PORTS:-22379 22381 22383}"
PMW_HA_ETCD_PEER_PORTS="${PMW_HA_ETCD_PEER_PORTS:-22380 22382 22384}"
PMW_HA_PG_PORTS="${PMW_HA_PG_PORTS:-25442 25443}"
PMW_HA_REST_PORTS="${PMW_HA_REST_PORTS:-28008 28009}"
HA_ETCD_NODES=(1 2 3)
HA_PG_NODES=(1 2)
HA_SOCK="$PMW_HA_DIR/sock"
HA_RUN="$PMW_HA_DIR/run"   # the Postgres user's: pgpass files, HOME of Patroni

ha_port() { local -a ports; read -ra ports <<<"$1"; echo "${ports[$(($2 - 1))]}"; }
ha_log() { echo "$PMW_HA_DIR/log/$1.log"; }
ha_etcd_pid() { live_pid "$PMW_HA_DIR/etcd$1.pid" "$PMW_HA_DIR/etcd$1.yml"; }
ha_patroni_pid() { live_pid "$PMW_HA_DIR/pg$1.pid" "$PMW_HA_DIR/pg$1.yml"; }
ha_etcd_hosts() {
  local i hosts=()
  for i in "${HA_ETCD_NODES[@]}"; do hosts+=("127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$i")"); done
  local IFS=,
  echo "${hosts[*]}"
}

# The multi-host URL every pmw service takes for the HA stack: tried in order, read-write only.
ha_postgres_url() {
  local i hosts=()
  for i in "${HA_PG_NODES[@]}"; do hosts+=("127.0.0.1:$(ha_port "$PMW_HA_PG_PORTS" "$i")"); done
  local IFS=,
  echo "postgres://pmw@${hosts[*]}/pmw?target_session_attrs=read-write"
}

# PMW_POSTGRES_PATRONI_URLS for the HA stack: each Postgres member's Patroni REST API, in the
# URL's order (sessions go only to the member Patroni names primary).
ha_patroni_urls() {
  local i urls=()
  for i in "${HA_PG_NODES[@]}"; do urls+=("http://127.0.0.1:$(ha_port "$PMW_HA_REST_PORTS" "$i")"); done
  local IFS=,
  echo "${urls[*]}"
}

# Fill a template ($1) with KEY=VALUE pairs (@KEY@ → VALUE) into $2; refuse an unfilled value.
ha_render() {
  local tpl="$1" out="$2" kv args=()
  shift 2
  for kv in "$@"; do args+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  { echo "# written by scripts/stack from ${tpl#"$ROOT"/}"; sed "${args[@]}" "$tpl"; } >"$out.tmp"
  if grep -v '^ *#' "$out.tmp" | grep -q '@[A-Z_]*@'; then die "ha: $out has an unfilled template value"; fi
  mv "$out.tmp" "$out"
}

ha_etcd_healthy() {
  curl -s --max-time 2 "http://127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$1")/health" 2>/dev/null |
    grep -q '"health": *"true"'
}

ha_etcd_up() {
  local i j cluster="" dir
  for j in "${HA_ETCD_NODES[@]}"; do cluster+="${cluster:+,}e$j=http://127.0.0.1:$(ha_port "$PMW_HA_ETCD_PEER_PORTS" "$j")"; done
  for i in "${HA_ETCD_NODES[@]}"; do
    ha_etcd_pid "$i" >/dev/null && continue
    require_free_port "etcd e$i" "$(ha_port "$PMW_HA_ETCD_PORTS" "$i")" PMW_HA_ETCD_PORTS
    require_free_port "etcd e$i" "$(ha_port "$PMW_HA_ETCD_PEER_PORTS" "$i")" PMW_HA_ETCD_PEER_PORTS
    dir="$PMW_HA_DIR/etcd$i"
    mkdir -p "$dir" && chmod 0700 "$dir"
    ha_render "$ROOT/deploy/patroni/etcd.yml" "$PMW_HA_DIR/etcd$i.yml" "NAME=e$i" "DATA_DIR=$dir" \
      "CLIENT_URL=http://127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$i")" \
      "PEER_URL=http://127.0.0.1:$(ha_port "$PMW_HA_ETCD_PEER_PORTS" "$i")" \
      "INITIAL_CLUSTER=$cluster" "TOKEN=$PMW_HA_SCOPE"
    log "ha: starting etcd e$i on 127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$i")"
    spawn "$PMW_HA_DIR/etcd$i.pid" "$(ha_log "etcd$i")" /usr/bin/etcd --config-file "$PMW_HA_DIR/etcd$i.yml"
  done
  for i in "${HA_ETCD_NODES[@]}"; do wait_for "etcd e$i" "$(ha_log "etcd$i")" "$WAIT_TIMEOUT" ha_etcd_ready_or_dead "$i"; done
}

ha_etcd_ready_or_dead() {
  ha_etcd_healthy "$1" && return 0
  ha_etcd_pid "$1" >/dev/null || { log "error: etcd e$1 exited during start"; log_tail "$(ha_log "etcd$1")"; exit 1; }
  return 1
}

ha_patroni_up() {
  local i owner data
  owner="$(pg_os_user)"
  for i in "${HA_PG_NODES[@]}"; do
    ha_patroni_pid "$i" >/dev/null && continue
    data="$PMW_HA_DIR/pg$i"
    # A SIGKILLed member leaves a postmaster that may still run (its children die with it) or a
    # stale pid file: Patroni handles both, but our ports must be free of strangers.
    if ! live_pid "$data/postmaster.pid" "$data" >/dev/null; then
      require_free_port "pg$i" "$(ha_port "$PMW_HA_PG_PORTS" "$i")" PMW_HA_PG_PORTS
    fi
    require_free_port "patroni pg$i" "$(ha_port "$PMW_HA_REST_PORTS" "$i")" PMW_HA_REST_PORTS
    mkdir -p "$data" && chmod 0700 "$data"
    if is_root; then chown "$owner" "$data"; fi
    ha_render "$ROOT/deploy/patroni/patroni.yml" "$PMW_HA_DIR/pg$i.yml" "SCOPE=$PMW_HA_SCOPE" "NAME=pg$i" \
      "REST=127.0.0.1:$(ha_port "$PMW_HA_REST_PORTS" "$i")" "ETCD_HOSTS=$(ha_etcd_hosts)" \
      "MAX_CONNECTIONS=300" "AUTH=trust" "PG_LISTEN=127.0.0.1:$(ha_port "$PMW_HA_PG_PORTS" "$i")" \
      "DATA_DIR=$data" "BIN_DIR=$PMW_PG_BIN" "PGPASS=$HA_RUN/pgpass$i" \
      "SUPERUSER_PASSWORD=dev" "REPLICATION_PASSWORD=dev" "SOCKET_DIR=$HA_SOCK"
    chmod 0644 "$PMW_HA_DIR/pg$i.yml"
    log "ha: starting patroni pg$i (postgres 127.0.0.1:$(ha_port "$PMW_HA_PG_PORTS" "$i"), rest :$(ha_port "$PMW_HA_REST_PORTS" "$i"))"
    if is_root; then
      spawn "$PMW_HA_DIR/pg$i.pid" "$(ha_log "patroni$i")" setpriv --reuid="$owner" --regid="$owner" \
        --init-groups env HOME="$HA_RUN" /usr/bin/patroni "$PMW_HA_DIR/pg$i.yml"
    else
      spawn "$PMW_HA_DIR/pg$i.pid" "$(ha_log "patroni$i")" /usr/bin/patroni "$PMW_HA_DIR/pg$i.yml"
    fi
  done
}

# psql on member $1 as postgres over TCP (trust on loopback).
ha_psql() {
  local i="$1"
  shift
  "$PMW_PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(ha_port "$PMW_HA_PG_PORTS" "$i")" \
    -U postgres -d postgres "$@" 2>/dev/null
}

# The member number of the writable primary, if any.
ha_primary() {
  local i
  for i in "${HA_PG_NODES[@]}"; do
    [ "$(ha_psql "$i" -c 'SHOW transaction_read_only' || true)" = off ] && { echo "$i"; return 0; }
  done
  return 1
}

# Ready: a writable primary with a streaming synchronous standby that Patroni has recorded as
# such (its `/sync` key: only that member may be promoted).
ha_ready() {
  local p
  p="$(ha_primary)" || return 1
  [ "$(ha_psql "$p" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'" || true)" = 1 ] &&
    curl -s --max-time 2 "http://127.0.0.1:$(ha_port "$PMW_HA_REST_PORTS" "$p")/cluster" 2>/dev/null | grep -q '"sync_standby"'
}

ha_ready_or_dead() {
  ha_ready && return 0
  local i
  for i in "${HA_PG_NODES[@]}"; do
    ha_patroni_pid "$i" >/dev/null || { log "error: patroni pg$i exited"; log_tail "$(ha_log "patroni$i")"; exit 1; }
  done
  return 1
}

ha_up() {
  mkdir -p "$PMW_HA_DIR/log" "$HA_SOCK" "$HA_RUN"
  chmod 0755 "$PMW_HA_DIR" "$PMW_HA_DIR/log"
  chmod 0700 "$HA_RUN"
  if is_root; then chown "$(pg_os_user)" "$HA_SOCK" "$HA_RUN"; fi
  as_pg test -x "$PMW_HA_DIR" || die "ha: user $(pg_os_user) cannot traverse to $PMW_HA_DIR; choose another PMW_HA_DIR"
  # etcd keeps its members' peer URLs in its data: a cluster made on other ports or another
  # store API (or before this stamp existed) cannot start on these. It is a local test cluster: make a new one.
  # The store's API is in it too: a cluster Patroni kept in etcd's v3 keyspace is not in v2's.
  local stamp="etcd-v2|$PMW_HA_ETCD_PORTS|$PMW_HA_ETCD_PEER_PORTS|$PMW_HA_PG_PORTS|$PMW_HA_REST_PORTS"
  if [ -d "$PMW_HA_DIR/etcd1" ] && [ "$(cat "$PMW_HA_DIR/ports" 2>/dev/null)" != "$stamp" ]; then
    log "ha: the cluster in $PMW_HA_DIR was made on other ports or another store API: removing it to make a new one"
    ha_down
    rm -rf "$PMW_HA_DIR"/etcd[123] "$PMW_HA_DIR"/pg[12]
  fi
  echo "$stamp" >"$PMW_HA_DIR/ports"
  ha_etcd_up
  ha_patroni_up
  # The first bootstrap (initdb, then a base backup for the standby) takes ~15 s.
  wait_for "ha cluster" "$(ha_log patroni1)" "$((WAIT_TIMEOUT * 2))" ha_ready_or_dead
  ha_psql "$(ha_primary)" <<'SQL'
SELECT 'CREATE ROLE pmw LOGIN SUPERUSER'
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pmw') \gexec
SELECT 'CREATE DATABASE pmw OWNER pmw'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'pmw') \gexec
SQL
  log "ha: up, primary pg$(ha_primary); env: scripts/stack env ha"
}

ha_down() {
  local i data
  for i in 2 1; do
    stop_pidfile "patroni pg$i" "$PMW_HA_DIR/pg$i.pid" "$PMW_HA_DIR/pg$i.yml"
    # Patroni stops its Postgres on TERM; one left by a SIGKILLed Patroni is stopped here.
    data="$PMW_HA_DIR/pg$i"
    if live_pid "$data/postmaster.pid" "$data" >/dev/null; then
      as_pg "$PMW_PG_BIN/pg_ctl" -D "$data" -w -t 60 stop -m fast >/dev/null || true
    fi
  done
  for i in 3 2 1; do stop_pidfile "etcd e$i" "$PMW_HA_DIR/etcd$i.pid" "$PMW_HA_DIR/etcd$i.yml"; done
}

ha_status_line() {
  local i pid rc=0 primary
  primary="$(ha_primary || true)"
  for i in "${HA_ETCD_NODES[@]}"; do
    if pid="$(ha_etcd_pid "$i")"; then
      echo "etcd$i  running  127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$i") (pid $pid)"
    else
      echo "etcd$i  stopped  127.0.0.1:$(ha_port "$PMW_HA_ETCD_PORTS" "$i")"; rc=1
    fi
  done
  for i in "${HA_PG_NODES[@]}"; do
    if pid="$(ha_patroni_pid "$i")"; then
      echo "pg$i    running  127.0.0.1:$(ha_port "$PMW_HA_PG_PORTS" "$i") (patroni pid $pid, rest :$(ha_port "$PMW_HA_REST_PORTS" "$i"))$([ "$primary" = "$i" ] && echo ", primary")"
    else
      echo "pg$i    stopped  127.0.0.1:$(ha_port "$PMW_HA_PG_PORTS" "$i")"; rc=1
    fi
  done
  return "$rc"
}

# `scripts/stack env ha`: the single-node stack's env with the HA cluster's multi-host URL, and
# where the HA stack lives (its tests and drills read these).
ha_print_env() {
  print_env | grep -v '^export PMW_POSTGRES_URL='
  printf 'export %s=%q\n' PMW_POSTGRES_URL "$(ha_postgres_url)" \
    PMW_POSTGRES_PATRONI_URLS "$(ha_patroni_urls)" PMW_HA_DIR "$PMW_HA_DIR" \
    PMW_HA_PG_PORTS "$PMW_HA_PG_PORTS" PMW_HA_REST_PORTS "$PMW_HA_REST_PORTS" \
    PMW_HA_ETCD_PORTS "$PMW_HA_ETCD_PORTS"
}

# Every `ha` command runs under the HA dir's own lock (never the single-node stack's).
ha_cmd() {
  local cmd="$1"
  case "$cmd" in
    env) ha_print_env; return ;;
    status) ha_status_line || return 3; return ;;
    wait) wait_for "ha cluster" "$(ha_log patroni1)" "$WAIT_TIMEOUT" ha_ready; return ;;
  esac
  mkdir -p "$PMW_HA_DIR"
  if [ -z "${PMW_HA_LOCKED:-}" ]; then
    PMW_HA_LOCKED=1 exec flock -o -w 600 "$PMW_HA_DIR/lock" "$ROOT/scripts/stack" "$cmd" ha
  fi
  case "$cmd" in
    up) PMW_INSTALL_QUIET=1 "$ROOT/scripts/install" ha && ha_up ;;
    down) ha_down ;;
  esac
}
