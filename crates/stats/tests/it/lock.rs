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

/// The stats writer's (holder, epoch), if any took it.
async fn writer(client: &tokio_postgres::Client) -> Option<(String, i64)> {
    client
        .query_opt(
            "SELECT holder, epoch FROM writer_epochs WHERE lock_key = $1",
            &[&keys::STATS],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// `instance`'s heartbeat state.
async fn beat(client: &tokio_postgres::Client, instance: &str) -> Option<serde_json::Value> {
    client
        .query_opt(
            "SELECT state FROM heartbeats WHERE service = 'pmw-stats' AND instance = $1",
            &[&instance],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// A pmw-stats child named `instance`, on a free port.
fn child(db: &TestDb, instance: &str) -> ChildService {
    let mut env = db.env();
    for (k, v) in [
        ("PMW_INSTANCE", instance),
        ("PMW_STATS_LISTEN", "127.0.0.1:0"),
        ("PMW_STATS_INTERVAL_MS", "500"),
        ("PMW_STATS_LOCK_SEGMENT_MS", "200"),
        ("PMW_STATS_METRICS_ADDR", "127.0.0.1:0"),
    ] {
        env.push((k.into(), v.into()));
    }
    ChildService::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_pmw-stats")),
        &env,
        &[],
    )
}

/// Wait until `instance` leads (holds the epoch and beats as the leader); its epoch and address.
async fn leads(client: &tokio_postgres::Client, instance: &str) -> (i64, std::net::SocketAddr) {
    let got = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let epoch = writer(client).await.filter(|(h, _)| h == instance)?.1;
            let state = beat(client, instance).await?;
            let listen = state["listen"]
                .as_str()
                .filter(|_| state["role"] == "leader")?;
            Some((epoch, listen.parse().unwrap()))
        },
    )
    .await;
    got.unwrap_or_else(|| panic!("{instance} never led"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_stats_leader_is_deposed_by_its_standby_whose_dashboard_serves() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let a = child(&db, "stats-a");
    let (e_a, addr_a) = leads(&client, "stats-a").await;
    json_after(addr_a, 0).await;
    let mut b = child(&db, "stats-b");
    let standby = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let state = beat(&client, "stats-b").await;
            state.is_some_and(|s| s["role"] == "standby")
        },
    )
    .await;
    assert!(standby, "stats-b never beat as the standby");
    assert!(b.is_running(), "the standby waits, it does not exit");
    // Segmented: the waiting session's transaction (and so any snapshot, its backend_xmin)
    // is a new one each segment, never one long wait pinning xmin. (Measuring backend_xmin
    // itself needs the cluster to itself: push's exclusive_ test does, on the same
    // WriterLock::acquire.)
    let starts = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let renewed = eventually_every(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let row = client
            .query_opt(
                "SELECT xact_start::text FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'pmw-stats:lock' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap();
            let mut seen = starts.lock().unwrap();
            if let Some(Some(t)) = row.map(|r| r.get::<_, Option<String>>(0)) {
                seen.insert(t);
            }
            seen.len() >= 3
        },
    )
    .await;
    assert!(
        renewed,
        "the standby's lock wait is one long transaction: {starts:?}"
    );

    // Frozen: its session and lock stay; past the lease the standby deposes it.
    a.signal("STOP");
    let t0 = std::time::Instant::now();
    let (e_b, addr_b) = leads(&client, "stats-b").await;
    let took = t0.elapsed();
    assert!(e_b > e_a, "epochs rise: {e_a} then {e_b}");
    let since = pmw_core::UnixMs::now().0;
    json_after(addr_b, since).await;
    let fence = format!("SELECT {}", pmw_core::lock::fence_sql(keys::STATS, "$1"));
    let passes = |e: i64| {
        let (c, f) = (&client, &fence);
        async move { c.query_one(f, &[&e]).await.unwrap().get::<_, bool>(0) }
    };
    assert!(!passes(e_a).await, "the frozen leader's writes are refused");
    assert!(passes(e_b).await, "the new leader writes");
    // Woken, the old leader exits 75 (its lock session is gone); the new one keeps serving.
    let mut a = a;
    a.signal("CONT");
    assert_eq!(a.wait_code(Duration::from_secs(60)).await, 75);
    json_after(addr_b, pmw_core::UnixMs::now().0).await;
    eprintln!(
        "stats pair: takeover after SIGSTOP {} ms (lease {} ms)",
        took.as_millis(),
        pmw_core::writer::LEASE.as_millis()
    );
    b.terminate();
    assert_eq!(b.wait_code(Duration::from_secs(60)).await, 0);
}
