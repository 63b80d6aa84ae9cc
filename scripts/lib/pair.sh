# shellcheck shell=bash
# Rolling restart of a single-writer pair under pm2 (pmw-live: live/live-b, pmw-stats:
# stats/stats-b; docs/OPERATIONS.md, "The live and stats pairs"), as scripts/deploy/push rolls
# push-a/push-b: restart the standby, wait until it waits on the writer lock again, then stop
# the leader gracefully (it releases the lock; the standby takes over within a lock segment).
# It acts on the heartbeats and `writer_epochs` (who holds the lock), not on a fixed script: an
# instance is restarted only while the other is up, a leader killed meanwhile counts as
# restarted, and a Postgres restart is waited out (PMW_DEPLOY_MAX_SECS, default 300;
# PMW_DEPLOY_BACK_SECS, default 120, for one restarted instance to come back). The pm2 app of
# instance I is pmw-I. Needs log/die (common.sh) and pm2_cmd (pm2.sh).

pair_now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# "instance role started_ms" of each instance of service $1 with a beat in the last 12 s (the
# stats leader beats every 5 s).
pair_fresh() {
  "$PMW_PG_BIN/psql" -X -qAt -F ' ' "$PMW_POSTGRES_URL" -c \
    "SELECT instance, coalesce(state->>'role', 'none'), started_ms FROM heartbeats WHERE service = '$1' AND beat_ms >= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 12000 ORDER BY instance" 2>/dev/null || true
}

# The instance holding writer lock $1 (its latest epoch).
pair_leader() {
  "$PMW_PG_BIN/psql" -X -qAt "$PMW_POSTGRES_URL" -c "SELECT holder FROM writer_epochs WHERE lock_key = $1" 2>/dev/null || true
}

# The role of $1 in the fresh rows $2, if that process started after $3.
pair_role_since() {
  awk -v i="$1" -v s="$3" '$1 == i && $3 >= s { print $2 }' <<<"$2"
}

pair_restart() {
  local i out
  for i in 1 2 3 4 5 6 7 8 9 10; do
    if out="$(pm2_cmd restart "$1" --update-env 2>&1)"; then
      return 0
    fi
    log "pm2 refused to restart $1 (try $i): $(tail -n 1 <<<"$out")"
    sleep 1
  done
  die "pm2 would not restart $1: $(tail -n 1 <<<"$out") (a pair needs both members: pm2 start deploy/pm2/ecosystem.config.js --only $1)"
}

# deploy_pair SERVICE LOCK_KEY INSTANCE_A INSTANCE_B: restart both, standby first, no gap.
# Sets PAIR_T1 (ms) to when the leader was restarted.
deploy_pair() {
  local service="$1" key="$2" a="$3" b="$4"
  local max_secs="${PMW_DEPLOY_MAX_SECS:-300}" back_secs="${PMW_DEPLOY_BACK_SECS:-120}"
  local t0 deadline rows leader standby lead_new stand_new state last="" i
  local -A restarted=()
  t0="$(pair_now_ms)"
  deadline=$(( t0 + max_secs * 1000 ))
  PAIR_T1="$t0"
  while :; do
    [ "$(pair_now_ms)" -lt "$deadline" ] || die "deploy stopped after ${max_secs} s without finishing (last state: ${last:-Postgres unreadable}); nothing more restarted"
    rows="$(pair_fresh "$service")"
    leader="$(pair_leader "$key")"
    state="leader=${leader:-?} $(tr '\n' ';' <<<"$rows")"
    if [ "$state" != "$last" ]; then
      log "state: $state"
      last="$state"
    fi
    if [ "$leader" = "$a" ]; then standby="$b"
    elif [ "$leader" = "$b" ]; then standby="$a"
    else sleep 0.2; continue
    fi
    lead_new="$(pair_role_since "$leader" "$rows" "$t0")"
    stand_new="$(pair_role_since "$standby" "$rows" "$t0")"
    # Done: both run a process started during this deploy, one leads, the other waits.
    if [ "$lead_new" = leader ] && [ "$stand_new" = standby ]; then
      break
    fi
    for i in "$leader" "$standby"; do
      if [ -n "${restarted[$i]:-}" ] && [ -z "$(pair_role_since "$i" "$rows" "${restarted[$i]}")" ] \
        && [ "$(( $(pair_now_ms) - ${restarted[$i]} ))" -gt $(( back_secs * 1000 )) ]; then
        die "pmw-$i did not come back within ${back_secs} s of its restart (state: $state)"
      fi
    done
    # Restart only while the other instance is up (a fresh beat with a role), one at a time.
    if [ -z "$stand_new" ] && [ -z "${restarted[$standby]:-}" ]; then
      if [ "$(pair_role_since "$leader" "$rows" 0)" = leader ]; then
        log "restarting the standby pmw-$standby"
        restarted[$standby]="$(pair_now_ms)"
        pair_restart "pmw-$standby"
        continue
      fi
    elif [ "$stand_new" = standby ] && [ -z "$lead_new" ] && [ -z "${restarted[$leader]:-}" ]; then
      log "pmw-$standby waits on the lock; stopping the leader pmw-$leader gracefully"
      PAIR_T1="$(pair_now_ms)"
      restarted[$leader]="$PAIR_T1"
      pair_restart "pmw-$leader"
      continue
    fi
    sleep 0.2
  done
  log "pmw-$leader leads, pmw-$standby is the standby; both restarted (deploy took $(( $(pair_now_ms) - t0 )) ms)"
}
