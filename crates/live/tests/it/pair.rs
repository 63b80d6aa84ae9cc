//! pmw-live as a leader/standby pair of real processes (issue 44): the standby waits on the
//! writer lock beating `{"role":"standby"}`, takes over from a killed leader and deposes a
//! frozen (SIGSTOP) one past its lease; the old leader's writes are fenced by the writer epoch;
//! the ledger then holds every fill of the chain once (judged by `eth_getLogs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;
use pmw_core::lock::{fence_sql, keys, own_fence_sql};
use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_sim::EXCHANGES;
use pmw_testkit::{eventually_every, ChildService};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(60);

/// The environment of a pmw-live child named `instance` on this harness's chain.
fn env(h: &Harness, instance: &str, start: u64) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        h.db.env()
            .into_iter()
            .filter(|(k, _)| !k.starts_with("PMW_RPC_"))
            .collect();
    for (k, v) in [
        ("PMW_RPC_WS_URL", h.anvil.ws_url()),
        ("PMW_RPC_HTTP_URL", h.anvil.http_url()),
        ("PMW_INSTANCE", instance.to_string()),
        ("PMW_LIVE_START_BLOCK", start.to_string()),
        ("PMW_LIVE_LOCK_SEGMENT_MS", "200".into()),
        ("PMW_LIVE_POLL_INTERVAL_MS", "200".into()),
        ("PMW_LIVE_METRICS_ADDR", "127.0.0.1:0".into()),
        ("PMW_GAMMA_URL", "http://127.0.0.1:9".into()),
    ] {
        env.push((k.into(), v));
    }
    env
}

fn start(h: &Harness, instance: &str, start: u64) -> ChildService {
    ChildService::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_pmw-live")),
        &env(h, instance, start),
        &[],
    )
}

/// The live writer's (holder, epoch), if any took it.
async fn writer(c: &tokio_postgres::Client) -> Option<(String, i64)> {
    c.query_opt(
        "SELECT holder, epoch FROM writer_epochs WHERE lock_key = $1",
        &[&keys::LIVE],
    )
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

/// Wait until `instance` holds the live lock; its epoch.
async fn holds(c: &tokio_postgres::Client, instance: &str) -> i64 {
    let got = eventually_every(WITHIN, Duration::from_millis(50), || async {
        writer(c).await.filter(|(h, _)| h == instance).map(|w| w.1)
    })
    .await;
    got.unwrap_or_else(|| panic!("{instance} never took the live lock"))
}

/// Wait until `instance` beats as a standby while a session waits on the live lock.
async fn standby(c: &tokio_postgres::Client, instance: &str) {
    let waiting = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let role: Option<String> = c
            .query_opt(
                "SELECT state->>'role' FROM heartbeats WHERE service = 'pmw-live' AND instance = $1",
                &[&instance],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        let waiters: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 \
                 AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[&(keys::LIVE as u32)],
            )
            .await
            .unwrap()
            .get(0);
        role.as_deref() == Some("standby") && waiters == 1
    })
    .await;
    assert!(
        waiting,
        "{instance} never waited on the lock as the standby"
    );
}

/// Whether a write fenced by `epoch` would pass now.
async fn fence_passes(c: &tokio_postgres::Client, epoch: i64) -> bool {
    let sql = format!("SELECT {}", fence_sql(keys::LIVE, "$1"));
    c.query_one(&sql, &[&epoch]).await.unwrap().get(0)
}

/// Whether a write fenced by `epoch` on the session it is sent on ([`own_fence_sql`], live's
/// block commit on its lock session) would pass now.
async fn own_fence_passes(c: &tokio_postgres::Client, epoch: i64) -> bool {
    let sql = format!("SELECT {}", own_fence_sql(keys::LIVE, "$1"));
    c.query_one(&sql, &[&epoch]).await.unwrap().get(0)
}

/// Every `OrderFilled` of the exchanges on the chain from `from`, by (block, log index).
async fn chain_fills(h: &Harness, from: u64) -> BTreeSet<(u64, u32)> {
    let addresses: Vec<String> = EXCHANGES.iter().map(|e| e.address.to_string()).collect();
    let filter =
        json!({"fromBlock": format!("0x{from:x}"), "toBlock": "latest", "address": addresses});
    let logs = h.sim.rpc().logs(filter).await.unwrap();
    logs.iter()
        .filter(|l| {
            l.topics
                .first()
                .is_some_and(|t| ORDER_FILLED_TOPICS.contains(&t.0))
        })
        .map(|l| (l.block_number.0, l.log_index.0 as u32))
        .collect()
}

/// The ledger equals the chain: every fill once, none extra.
async fn ledger_is_the_chain(h: &Harness, from: u64) {
    h.wait_caught_up(WITHIN).await;
    let visible = h.visible().await;
    let keys: Vec<(u64, u32)> = visible
        .iter()
        .map(|r| (r.block_number, r.log_index))
        .collect();
    let once: BTreeSet<(u64, u32)> = keys.iter().copied().collect();
    assert_eq!(once.len(), keys.len(), "a fill is in the ledger twice");
    assert_eq!(
        once,
        chain_fills(h, from).await,
        "the ledger is not the chain's fills"
    );
    assert_exactly_emitted(&visible, &h.sim.canonical());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_pair_survives_a_killed_and_a_frozen_leader_and_fences_the_frozen_one() {
    let h = Harness::new().await;
    let from = h.sim.rpc().latest_block().await.unwrap().number.0 + 1;
    let c = h.db.connect().await;
    let mut a = start(&h, "live-a", from);
    let e_a = holds(&c, "live-a").await;
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    let b = start(&h, "live-b", from);
    standby(&c, "live-b").await;

    // Killed: the lock goes with the session; the standby takes over at once.
    a.signal("KILL");
    let t0 = Instant::now();
    h.sim.run_matches(3).await.unwrap();
    let e_b = holds(&c, "live-b").await;
    let killed = t0.elapsed();
    assert!(e_b > e_a, "epochs rise: {e_a} then {e_b}");
    let _ = tokio::time::timeout(WITHIN, a.child.wait())
        .await
        .expect("killed");
    ledger_is_the_chain(&h, from).await;

    // Frozen: the leader keeps its session (and lock); its lease runs out, the standby
    // terminates its lock session and takes over.
    let mut a2 = start(&h, "live-a", from);
    standby(&c, "live-a").await;
    b.signal("STOP");
    let t1 = Instant::now();
    h.sim.run_matches(3).await.unwrap();
    let e_a2 = holds(&c, "live-a").await;
    let frozen = t1.elapsed();
    assert!(e_a2 > e_b, "epochs rise: {e_b} then {e_a2}");
    h.sim.run_matches(2).await.unwrap();
    ledger_is_the_chain(&h, from).await;
    assert!(
        !fence_passes(&c, e_b).await,
        "the frozen leader's fenced writes must be refused"
    );
    assert!(fence_passes(&c, e_a2).await, "the new leader writes");
    // Woken, the old leader writes nothing and exits 75 (its lock session is gone).
    let mut b = b;
    b.signal("CONT");
    assert_eq!(b.wait_code(WITHIN).await, 75, "the deposed leader exits 75");
    h.sim.run_matches(2).await.unwrap();
    ledger_is_the_chain(&h, from).await;
    assert_eq!(writer(&c).await, Some(("live-a".into(), e_a2)));
    eprintln!(
        "live pair: takeover after SIGKILL {} ms, after SIGSTOP {} ms (lease {} ms)",
        killed.as_millis(),
        frozen.as_millis(),
        pmw_core::writer::LEASE.as_millis()
    );
    a2.terminate();
    assert_eq!(a2.wait_code(WITHIN).await, 0);
}

/// The hole of a pid-keyed fence (issue 44): a successor whose lock session has the old
/// writer's pid (a promoted primary may hand it out again) let the old writer's writes pass.
/// Here the successor is literally the same session taking the next epoch: the old epoch is
/// fenced anyway, the new one passes, and a session that does not hold the lock passes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_with_the_old_writers_pid_still_fences_the_old_writer() {
    let db = pmw_testkit::TestDb::new().await;
    let c = db.connect().await;
    let none = tokio_util::sync::CancellationToken::new();
    let mut lock = pmw_core::lock::WriterLock::acquire(
        &db.cfg,
        "pair-test",
        keys::LIVE,
        Duration::from_millis(200),
        &none,
    )
    .await
    .unwrap()
    .unwrap();
    let old = lock.take_epoch("live").await.unwrap();
    assert!(fence_passes(&c, old).await, "the holder writes");
    let pid = lock.pid();
    let new = lock.take_epoch("live-b").await.unwrap();
    assert_eq!(lock.pid(), pid, "the successor has the old writer's pid");
    assert!(new > old, "epochs rise: {old} then {new}");
    assert!(
        !fence_passes(&c, old).await,
        "the old writer's writes must be refused although its pid holds the lock"
    );
    assert!(fence_passes(&c, new).await, "the successor writes");
    lock.release().await.unwrap();
    assert!(
        !fence_passes(&c, new).await,
        "no write passes once the lock is released"
    );
}

/// Live's block commit runs on its lock session, fenced by [`own_fence_sql`] instead of a read
/// of the lock table: it passes only the session's current epoch, on that session alone, and
/// once the lock is released the handle reaches no session (so nothing is written after it).
/// With a statement in flight at release the lock lasts until that statement's session closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_on_the_lock_session_passes_only_its_current_epoch_and_nothing_after_release() {
    let db = pmw_testkit::TestDb::new().await;
    let c = db.connect().await;
    let none = tokio_util::sync::CancellationToken::new();
    let acquire = || {
        pmw_core::lock::WriterLock::acquire(
            &db.cfg,
            "pair-test",
            keys::LIVE,
            Duration::from_millis(200),
            &none,
        )
    };
    let mut lock = acquire().await.unwrap().unwrap();
    let old = lock.take_epoch("live").await.unwrap();
    let handle = lock.session();
    let session = handle.get().expect("the lock is held");
    assert!(
        own_fence_passes(&session.client, old).await,
        "the holder writes"
    );
    assert!(
        !own_fence_passes(&c, old).await,
        "another session passes nothing, even with the current epoch"
    );
    let new = lock.take_epoch("live-b").await.unwrap();
    assert!(
        !own_fence_passes(&session.client, old).await,
        "a deposed epoch is refused on the lock session itself"
    );
    assert!(own_fence_passes(&session.client, new).await);
    drop(session);
    lock.release().await.unwrap();
    assert!(
        handle.get().is_none(),
        "a released lock's session is out of reach"
    );
    let free = "SELECT pg_try_advisory_lock($1)";
    assert!(c
        .query_one(free, &[&keys::LIVE])
        .await
        .unwrap()
        .get::<_, bool>(0));
    c.execute("SELECT pg_advisory_unlock($1)", &[&keys::LIVE])
        .await
        .unwrap();

    // Released with a statement in flight: the lock holds until that statement's session ends.
    let lock = acquire().await.unwrap().unwrap();
    let handle = lock.session();
    let in_flight = handle.get().unwrap();
    lock.release().await.unwrap();
    assert!(
        !c.query_one(free, &[&keys::LIVE])
            .await
            .unwrap()
            .get::<_, bool>(0),
        "still held while its session can write"
    );
    drop(in_flight);
    assert!(handle.get().is_none());
    eventually_every(WITHIN, Duration::from_millis(50), || async {
        c.query_one(free, &[&keys::LIVE])
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}
