//! Leadership with pmw-live ingesting: a standby waits without listening (and PUSH_WORKER=0
//! refuses), its lock wait pins no xmin, a fenced leader lands no write, a graceful handover under
//! load loses nothing, health follows the first round.

use std::time::Duration;

use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_sim::RunConfig;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{eventually_every, observe_for};
use tokio_util::sync::CancellationToken;

use super::WITHIN;
use crate::harness::{connect, first_of, hello_cursor, strictly_increasing, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_waits_without_listening_and_push_worker_0_refuses() {
    let h = Harness::new().await;
    let (a, _addr) = h.leader("push-a").await;
    let (b, mut b_bound) = h.start_push("push-b", h.push_config());
    // Negative check: the standby does not bind within the window.
    observe_for(Duration::from_millis(1500)).await;
    assert!(
        b_bound.try_recv().is_err(),
        "the standby must not bind before it holds the lock"
    );
    assert!(!b.is_finished());
    let c = h.db.connect().await;
    let listeners: i64 = c
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pmw-push:listen'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(listeners, 1, "only the leader LISTENs");

    let refused = pmw_push::run_with(
        h.core(),
        pmw_push::PushConfig {
            push_worker: false,
            ..h.push_config()
        },
        pmw_push::webhook::WebhookConfig::default(),
        CancellationToken::new(),
        None,
    )
    .await;
    match refused {
        Err(e) => {
            assert_eq!(e.exit_code(), 78);
            assert!(e.to_string().contains("PUSH_WORKER=0"), "{e}");
        }
        Ok(()) => panic!("PUSH_WORKER=0 must refuse to start"),
    }
    a.stop().await.unwrap();
    let addr_b = tokio::time::timeout(WITHIN, b_bound)
        .await
        .expect("standby takes over")
        .unwrap();
    assert_ne!(addr_b.port(), 0);
    b.stop().await.unwrap();
}

/// `exclusive_`: run alone (scripts/test's second pass). A snapshot's xmin is the oldest running
/// xid of the whole cluster, so a long transaction in another test's database would pin the
/// standby's fresh segments too and make this measurement meaningless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_the_standby_lock_wait_does_not_pin_backend_xmin() {
    let h = Harness::new().await;
    let (a, _) = h.leader("push-a").await;
    let mut cfg = h.push_config();
    cfg.push_lock_segment_ms = 200;
    let (b, _b_bound) = h.start_push("push-b", cfg);
    let c = h.db.connect().await;
    // The standby waits on the lock: its lock session is there.
    let waiting = eventually_every(WITHIN, Duration::from_millis(50), || async {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pmw-push:push-b:lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n > 0
    })
    .await;
    assert!(waiting, "push-b's lock session never showed up");
    c.batch_execute("CREATE TABLE churn (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = off); INSERT INTO churn VALUES (1, 0)")
        .await
        .unwrap();
    for i in 0..500 {
        c.execute("UPDATE churn SET v = $1 WHERE id = 1", &[&i])
            .await
            .unwrap();
    }
    // Sample the waiting session's xmin: it must not stay pinned across segments.
    let mut xmins = Vec::new();
    for _ in 0..20 {
        let x: Option<String> = c
            .query_opt("SELECT backend_xmin::text FROM pg_stat_activity WHERE application_name = 'pmw-push:push-b:lock' AND datname = current_database()", &[])
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        xmins.push(x);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.batch_execute("VACUUM churn").await.unwrap();
    let dead: i64 = c
        .query_one(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'churn'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!("standby backend_xmin samples: {xmins:?}; dead tuples after VACUUM: {dead}");
    assert!(
        dead < 50,
        "VACUUM must reclaim the churned rows while the standby waits ({dead} dead)"
    );
    let distinct: std::collections::BTreeSet<_> = xmins.iter().collect();
    assert!(
        distinct.len() > 1 || xmins.iter().any(Option::is_none),
        "backend_xmin moves between segments: {xmins:?}"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_epoch_was_bumped_lands_no_write() {
    let h = Harness::new().await;
    let (push, _) = h.leader("push-a").await;
    let (_, _key) = h.account(&demo_wallets(6)).await;
    h.sim.run_matches(2).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let c = h.db.connect().await;
    let before = c
        .query_one(
            "SELECT block_number, log_index, (SELECT count(*) FROM ws_claims) FROM push_cursor",
            &[],
        )
        .await
        .unwrap();
    let (b0, l0, n0): (i64, i32, i64) = (before.get(0), before.get(1), before.get(2));
    c.execute("UPDATE push_epoch SET epoch = epoch + 1", &[])
        .await
        .unwrap();
    h.sim.run_matches(3).await.unwrap();
    let outcome = tokio::time::timeout(WITHIN, push.join())
        .await
        .expect("the deposed leader stops");
    assert_eq!(outcome.unwrap_err().exit_code(), 75);
    let after = c
        .query_one(
            "SELECT block_number, log_index, (SELECT count(*) FROM ws_claims) FROM push_cursor",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            after.get::<_, i64>(0),
            after.get::<_, i32>(1),
            after.get::<_, i64>(2)
        ),
        (b0, l0, n0),
        "0 writes landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_under_load_loses_nothing() {
    let h = Harness::new().await;
    let (a, addr_a) = h.leader("push-a").await;
    let (b, b_bound) = h.start_push("push-b", h.push_config());
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let mut c1 = connect(addr_a, &key, None).await;
    let start: Cursor = hello_cursor(&mut c1).await;
    let run = h.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(30),
            count: Some(80),
            duration: None,
        },
        CancellationToken::new(),
    );
    // Under load: the leader stops while trades flow (the run is 80 matches, 30 ms apart).
    c1.wait_seen(WITHIN, "10 trades", |s| s.trades.len() >= 10)
        .await;
    let stop_at = std::time::Instant::now();
    a.stop().await.unwrap();
    let seen1 = c1.done.await.unwrap();
    assert_eq!(seen1.close_code, Some(1012));
    let addr_b = tokio::time::timeout(WITHIN, b_bound)
        .await
        .unwrap()
        .unwrap();
    let last = seen1.trades.last().copied().unwrap_or(start);
    let mut c2 = connect(addr_b, &key, Some(last)).await;
    first_of(&mut c2, "hello").await;
    let gap = stop_at.elapsed();
    run.await.unwrap().unwrap();
    h.wait_pushed(WITHIN).await;
    c2.wait_trades(&h.expected(&mine, last), WITHIN).await;
    b.stop().await.unwrap();
    let seen2 = c2.done.await.unwrap();
    let mut union = seen1.trades.clone();
    union.extend(&seen2.trades);
    println!(
        "handover: client back on the new leader {} ms after the stop began",
        gap.as_millis()
    );
    assert!(strictly_increasing(&union), "0 out of order, 0 duplicated");
    assert_eq!(union, h.expected(&mine, start), "0 lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_ready_only_after_a_round_and_reports_the_leader() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let url = format!("http://{addr}/health");
    let ready = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let r = reqwest::get(&url).await.unwrap();
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            status == 200,
            body["ready"] == true,
            "status follows readiness: {body}"
        );
        if status == 200 {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    let body = ready.unwrap_or_else(|body| panic!("never ready: {body}"));
    assert!(body["last_round_ms"].as_i64().unwrap() > 0);
    assert!(body["epoch"].as_i64().unwrap() >= 1);
    push.stop().await.unwrap();
}

/// A graceful stop keeps the WebSocket feed going while the webhook attempts in flight finish
/// (a receiver that answers after 4 s): a trade mined during that drain reaches the open session
/// before the 1012 close. The feed used to stop at the signal, so a rolling deploy darkened
/// every session for as long as the slowest receiver took (checker seed 24459: 1.9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_goes_on_while_a_graceful_stop_drains_the_webhooks() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let h = Harness::new().await;
    let mine = demo_wallets(6);
    let (account, key) = h.account(&mine).await;
    let asked = std::sync::Arc::new(AtomicBool::new(false));
    let flag = asked.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::post(move || {
            let flag = flag.clone();
            async move {
                flag.store(true, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(4)).await;
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/slow", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    let pg = h.db.connect().await;
    Endpoint::new(account, &url, "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0")
        .created(pmw_core::UnixMs::now().0)
        .insert(&pg)
        .await;
    pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    let (a, addr) = h.leader("push-a").await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(1).await.unwrap();
    let in_flight = eventually_every(WITHIN, Duration::from_millis(20), || async {
        asked.load(Ordering::SeqCst)
    })
    .await;
    assert!(in_flight, "no webhook attempt started");
    // Attempts are in flight for 4 s: stop the leader, then trade during the drain.
    let stopping = tokio::spawn(a.stop());
    // Negative check: the stop does not finish within the window (the receiver holds it 4 s).
    observe_for(Duration::from_millis(300)).await;
    assert!(!stopping.is_finished(), "the stop waits for the receiver");
    h.sim.run_matches(1).await.unwrap();
    let seen = crate::harness::closed_with(c, 1012, WITHIN, "closed at the hand-over").await;
    stopping.await.unwrap().unwrap();
    let owed = h.expected(&mine, start);
    println!(
        "drain: {} trades owed over both matches, {} received before the 1012",
        owed.len(),
        seen.trades.len()
    );
    assert_eq!(
        seen.trades, owed,
        "the trade mined during the drain was delivered"
    );
}
