//! `scripts/lib/pair.sh` (what `scripts/deploy/live` and `scripts/deploy/stats` run) against a
//! real pmw-stats pair: pm2 is replaced by a shell function that restarts the members the way
//! pm2 does (SIGTERM, wait for the exit, start again). The standby is restarted first, the
//! leader only once the new standby waits on the lock; the roles swap; both run new processes.

use std::process::Command;

use pmw_testkit::{repo_root, TestDb};

const HARNESS: &str = r#"
set -euo pipefail
source scripts/lib/common.sh
D="$1"
start() {
  PMW_INSTANCE="$1" PMW_STATS_LISTEN=127.0.0.1:0 PMW_STATS_METRICS_ADDR=127.0.0.1:0 \
    PMW_STATS_LOCK_SEGMENT_MS=200 target/debug/pmw-stats >>"$D/$1.log" 2>&1 &
  echo $! >"$D/$1.pid"
}
pm2_cmd() {
  local inst="${2#pmw-}" pid
  pid="$(cat "$D/$inst.pid")"
  echo "restart $inst" >>"$D/order"
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  start "$inst"
}
# shellcheck source=/dev/null
source scripts/lib/pair.sh
start stats
until [ "$(pair_leader 7002)" = stats ]; do sleep 0.1; done
start stats-b
until pair_fresh pmw-stats | grep -q '^stats-b standby '; do sleep 0.1; done
first="$(cat "$D/stats.pid") $(cat "$D/stats-b.pid")"
deploy_pair pmw-stats 7002 stats stats-b
echo "before $first after $(cat "$D/stats.pid") $(cat "$D/stats-b.pid") leader $(pair_leader 7002)" >>"$D/order"
kill -TERM "$(cat "$D/stats.pid")" "$(cat "$D/stats-b.pid")"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pair_deploy_restarts_the_standby_first_then_the_leader() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args(["-c", HARNESS, "pair-deploy"])
        .arg(dir.path())
        .current_dir(repo_root())
        .envs(db.env())
        .env("PMW_ENV", "development")
        .env("PMW_DEPLOY_MAX_SECS", "60")
        .output()
        .expect("bash");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pair deploy failed: {log}");
    let order = std::fs::read_to_string(dir.path().join("order")).unwrap();
    let lines: Vec<&str> = order.lines().collect();
    assert_eq!(
        lines[..2],
        ["restart stats-b", "restart stats"],
        "standby first: {order}\n{log}"
    );
    let pids: Vec<&str> = lines[2].split_whitespace().collect();
    // before <a> <b> after <a'> <b'> leader <instance>
    assert!(
        pids[1] != pids[4] && pids[2] != pids[5],
        "both restarted: {order}"
    );
    assert_eq!(pids[7], "stats-b", "the roles swapped: {order}");
    assert!(
        log.contains("pmw-stats-b leads, pmw-stats is the standby; both restarted"),
        "{log}"
    );
}
