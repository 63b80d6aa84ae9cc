//! The stats writer lock: a second instance waits (without binding its port) and takes over when
//! the first stops; losing the lock session ends the process with exit code 75.

use std::cell::RefCell;
use std::time::Duration;

use crate::common::*;
use pmw_core::lock::keys;
use pmw_testkit::{assert_eventually, eventually_every, ChildService, ServiceHandle, TestDb};

/// Pid of the session holding the stats advisory lock, if any.
async fn holder(client: &tokio_postgres::Client) -> Option<i32> {
    client
        .query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&(keys::STATS as u32)],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_waits_for_the_lock_then_takes_over() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (a, addr_a) = start(db.cfg.clone(), stats_config(500)).await;
    json_after(addr_a, 0).await;

    let mut cfg_b = db.cfg.clone();
    cfg_b.instance = Some("stats-b".into());
    let (b, mut rx_b) = ServiceHandle::spawn_bound(move |shutdown, bound| {
        pmw_stats::run_with(cfg_b, stats_config(500), shutdown, Some(bound))
    });
    // B starts, beats "waiting for lock" and waits on its own lock session.
    let waiting = || async {
        let state: Option<serde_json::Value> = client
            .query_opt(
                "SELECT state FROM heartbeats WHERE service = 'pmw-stats' AND instance = 'stats-b'",
                &[],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        let sessions: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'pmw-stats:lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!b.is_finished(), "the second instance must wait, not exit");
        sessions == 2 && state.is_some_and(|s| s["state"] == "waiting for lock")
    };
    assert_eventually!(Duration::from_secs(60), waiting().await, "B never waited");
    // Negative check: several lock segments (200 ms each) pass without B binding or exiting.
    pmw_testkit::observe_for(Duration::from_millis(1_500)).await;
    assert!(
        rx_b.try_recv().is_err(),
        "the waiting instance must not bind"
    );
    assert!(!b.is_finished(), "the waiting instance keeps waiting");
    assert_ne!(
        holder(&client).await,
        None,
        "A still holds the lock while B waits"
    );

    // A stops cleanly and releases; B takes over and serves.
    a.stop().await.unwrap();
    let addr_b = tokio::time::timeout(Duration::from_secs(30), rx_b)
        .await
        .expect("B takes over within 30 s")
        .unwrap();
    json_after(addr_b, 0).await;
    assert!(holder(&client).await.is_some());
    b.stop().await.unwrap();
    assert_eq!(
        holder(&client).await,
        None,
        "a clean stop releases the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_session_exits_75() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let mut env = db.env();
    env.push(("PMW_STATS_LISTEN".into(), "127.0.0.1:0".into()));
    env.push(("PMW_STATS_INTERVAL_MS".into(), "500".into()));
    let child = RefCell::new(ChildService::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_pmw-stats")),
        &env,
        &[],
    ));
    let held = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let pid = holder(&client).await;
            assert!(
                pid.is_some() || child.borrow_mut().is_running(),
                "pmw-stats exited before taking its lock"
            );
            pid
        },
    )
    .await;
    let pid = held.expect("lock never taken");
    let mut child = child.into_inner();
    let terminated: bool = client
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    assert_eq!(
        child.wait_code(Duration::from_secs(30)).await,
        75,
        "a lost lock session is transient: exit 75"
    );
}
