//! pmw-push on the real stack with pmw-sim trading and pmw-live ingesting: per-user ledger order
//! under concurrency, resume without gap or duplicate, leadership (standby, fencing, handover,
//! PUSH_WORKER=0), slow consumers, a killed LISTEN session.

mod common;
#[path = "push/index.rs"]
mod index;
#[path = "push/liveness.rs"]
mod liveness;

use std::time::Duration;

use common::{connect, first_of, hello_cursor, strictly_increasing, Harness};
use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_sim::RunConfig;
use tokio_util::sync::CancellationToken;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_user_gets_exactly_its_trades_in_ledger_order() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    // 12 users over overlapping wallet sets.
    let mut users = Vec::new();
    for i in 0..12 {
        let ws: Vec<_> = (0..3)
            .map(|k| wallets[(i + k * 2) % wallets.len()])
            .collect();
        let (_, key) = h.account(&ws).await;
        let mut c = connect(addr, &key, None).await;
        first_of(&mut c, "hello").await;
        users.push((ws, c));
    }
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    // Several matches per block: many trades per block, many users per trade.
    h.sim
        .spawn(
            RunConfig {
                matches_per_block: 4,
                interval: Duration::ZERO,
                count: Some(60),
                duration: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap()
        .unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    push.stop().await.unwrap();
    let after = Cursor {
        block: start,
        log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
    };
    for (i, (ws, c)) in users.into_iter().enumerate() {
        let seen = c.done.await.unwrap();
        assert!(
            strictly_increasing(&seen.trades),
            "user {i} frames out of order: {:?}",
            seen.trades
        );
        assert_eq!(
            seen.trades,
            h.expected(&ws, after),
            "user {i} got exactly its wallets' fills"
        );
        assert_eq!(
            seen.close_code,
            Some(1012),
            "a graceful stop closes with 1012"
        );
        for f in seen.frames.iter().filter(|f| f["type"] == "trade") {
            assert!(f["t_push_ms"].as_i64().unwrap() >= f["t_detect_ms"].as_i64().unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_since_has_no_gap_and_no_duplicate_at_the_seam() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    let mine = vec![wallets[0], wallets[1], wallets[2]];
    let (_, key) = h.account(&mine).await;
    let mut c1 = connect(addr, &key, None).await;
    let hello = first_of(&mut c1, "hello").await;
    let start: Cursor = hello["cursor"].as_str().unwrap().parse().unwrap();
    let run = h.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(30),
            count: Some(80),
            duration: None,
        },
        CancellationToken::new(),
    );
    // Take a few live trades, then drop the connection mid-stream.
    let mut got = Vec::new();
    while got.len() < 5 {
        let v = first_of(&mut c1, "trade").await;
        got.push(v["cursor"].as_str().unwrap().parse::<Cursor>().unwrap());
    }
    c1.done.abort();
    drop(c1.events);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = *got.last().unwrap();
    let c2 = connect(addr, &key, Some(last)).await;
    run.await.unwrap().unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    push.stop().await.unwrap();
    let seen = c2.done.await.unwrap();
    let mut union = got.clone();
    union.extend(seen.trades.iter().copied());
    assert!(
        strictly_increasing(&union),
        "no duplicate and no reordering across the seam"
    );
    assert_eq!(
        union,
        h.expected(&mine, start),
        "the union is exactly the emitted set"
    );
    assert!(
        seen.trades.len() > 5,
        "the resumed session saw replayed and live trades"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_waits_without_listening_and_push_worker_0_refuses() {
    let h = Harness::new().await;
    let (a, _addr) = h.leader("push-a").await;
    let (b, mut b_bound) = h.start_push("push-b", h.push_config());
    tokio::time::sleep(Duration::from_millis(1500)).await;
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c = h.db.connect().await;
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
    tokio::time::sleep(Duration::from_millis(800)).await;
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
    tokio::time::sleep(Duration::from_millis(500)).await;
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
async fn a_slow_consumer_is_closed_and_others_are_unaffected() {
    let h = Harness::new().await;
    let mut cfg = h.push_config();
    // Larger than one round's burst for one account, far smaller than the whole run.
    cfg.push_ws_queue = 64;
    let (push, bound) = h.start_push("push-a", cfg);
    let addr = tokio::time::timeout(WITHIN, bound).await.unwrap().unwrap();
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    // The slow client: a raw TCP connection that upgrades and then never reads.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut slow = sock.connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer {key}\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut slow, req.as_bytes())
        .await
        .unwrap();
    let mut fast = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut fast).await;
    h.sim
        .spawn(
            RunConfig {
                matches_per_block: 2,
                interval: Duration::ZERO,
                count: Some(300),
                duration: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap()
        .unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let closed = push_slow_closed(&h).await;
    push.stop().await.unwrap();
    let seen = fast.done.await.unwrap();
    assert_eq!(
        seen.trades,
        h.expected(&mine, start),
        "the fast client got everything"
    );
    assert!(closed >= 1, "the slow consumer was closed");
    drop(slow);
}

async fn push_slow_closed(h: &Harness) -> i64 {
    // The leader reports sessions in its heartbeat; a closed slow session is gone from it.
    let c = h.db.connect().await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let sessions: i64 = c
            .query_one("SELECT coalesce((state->>'sessions')::bigint, -1) FROM heartbeats WHERE service = 'pmw-push' AND instance = 'push-a'", &[])
            .await
            .unwrap()
            .get(0);
        if sessions == 1 {
            return 1;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "slow session still registered ({sessions})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listen_session_is_caught_up_from_the_cursor() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(3).await.unwrap();
    let pg = h.db.connect().await;
    let killed: i64 = pg
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pmw-push:listen' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    h.sim.run_matches(5).await.unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !push.is_finished(),
        "a lost LISTEN session is reconnected, not fatal"
    );
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(seen.trades, h.expected(&mine, start));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_trades_report_client_observed_latency_and_carry_heartbeats() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (account, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim
        .spawn(
            RunConfig {
                matches_per_block: 1,
                interval: Duration::from_millis(250),
                count: Some(20),
                duration: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap()
        .unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // at least one heartbeat (1 s)
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(seen.trades, h.expected(&mine, start));
    let mut lat: Vec<i64> = seen
        .frames
        .iter()
        .filter(|f| f["type"] == "trade")
        .map(|f| f["_recv_ms"].as_i64().unwrap() - f["t_detect_ms"].as_i64().unwrap())
        .collect();
    lat.sort_unstable();
    let p = |q: f64| lat[((q * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1];
    println!(
        "client-observed detect→push over {} trades: p50 {} ms, p99 {} ms",
        lat.len(),
        p(0.5),
        p(0.99)
    );
    let hb = seen
        .frames
        .iter()
        .find(|f| f["type"] == "heartbeat")
        .expect("a heartbeat frame");
    assert!(
        hb["head"].as_u64().unwrap() > 0,
        "heartbeat carries the chain head: {hb}"
    );
    assert!(
        hb["cursor"].as_str().unwrap().parse::<Cursor>().is_ok(),
        "heartbeat carries the session cursor: {hb}"
    );
    // One push_latency row per delivered frame, never before detection.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let rows: Vec<(i64, i64)> = h
        .db
        .ch
        .query("SELECT t_detect_ms, t_push_ms FROM push_latency WHERE channel = 'ws' AND target_id = ?")
        .bind(account as u64)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        seen.trades.len(),
        "one latency row per delivered frame"
    );
    assert!(rows.iter().all(|(d, p)| p >= d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_bad_cursors_close_with_1008() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let (_, key) = h.account(&demo_wallets(2)).await;
    for (url, k) in [
        (format!("ws://{addr}/v1/ws"), None),
        (
            format!("ws://{addr}/v1/ws"),
            Some("pmw_0000000000000000000000000000000000000000000000000000000000000000"),
        ),
        (format!("ws://{addr}/v1/ws?ticket=pmwt_nope"), None),
        (format!("ws://{addr}/v1/ws?since=12-3"), Some(key.as_str())),
    ] {
        let c = common::connect_url(&url, k).await;
        let seen = c.done.await.unwrap();
        assert_eq!(seen.close_code, Some(1008), "{url} with {k:?}");
        assert!(seen.trades.is_empty());
    }
    push.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_retracts_delivered_trades_and_delivers_the_new_branch() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(6).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let outcome = h.sim.reorg(2).await.unwrap();
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    let retracted: std::collections::BTreeSet<(String, String)> = seen
        .frames
        .iter()
        .filter(|f| f["type"] == "retract")
        .map(|f| {
            (
                f["cursor"].as_str().unwrap().to_string(),
                f["trade"]["block_hash"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let orphaned: std::collections::BTreeSet<(String, String)> = outcome
        .orphaned
        .iter()
        .filter(|e| mine.contains(&e.maker))
        .map(|e| {
            (
                Cursor {
                    block: e.block_number,
                    log_index: e.log_index as u32,
                }
                .to_string(),
                e.block_hash.to_string(),
            )
        })
        .collect();
    assert!(!orphaned.is_empty());
    assert_eq!(
        retracted, orphaned,
        "every delivered orphaned trade is retracted, nothing else"
    );
    // The final view (trades minus retractions) is the canonical chain's.
    let mut live: Vec<(String, String)> = Vec::new();
    for f in &seen.frames {
        let key = || {
            (
                f["cursor"].as_str().unwrap().to_string(),
                f["trade"]["block_hash"].as_str().unwrap().to_string(),
            )
        };
        if f["type"] == "trade" {
            live.push(key());
        } else if f["type"] == "retract" {
            let k = key();
            live.retain(|x| *x != k);
        }
    }
    let mut canonical: Vec<(String, String)> = h
        .sim
        .canonical()
        .iter()
        .filter(|e| mine.contains(&e.maker))
        .map(|e| {
            (
                Cursor {
                    block: e.block_number,
                    log_index: e.log_index as u32,
                },
                e.block_hash.to_string(),
            )
        })
        .filter(|(c, _)| *c > start)
        .map(|(c, hsh)| (c.to_string(), hsh))
        .collect();
    canonical.sort();
    live.sort();
    assert_eq!(live, canonical);
}

#[path = "webhook_support/py.rs"]
#[allow(dead_code)]
mod py;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_deliver_each_matched_trade_once_verified_by_the_official_library() {
    let h = Harness::new().await;
    let (push, _addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[0], demo_wallets(6)[3]];
    let (account, _key) = h.account(&mine).await;
    let secret = pmw_push::webhook::sign::Secret::generate();
    let receiver = py::PyReceiver::start(&secret.expose()).await;
    let c = h.db.connect().await;
    let now = pmw_core::UnixMs::now().0;
    c.execute(
        "INSERT INTO webhook_endpoints (account_id, url, secret, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $4)",
        &[&account, &receiver.url(), &secret.expose(), &now],
    )
    .await
    .unwrap();
    c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Cursor {
        block: h.sim.rpc().latest_block().await.unwrap().number.0,
        log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
    };
    h.sim.run_matches(12).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let expected = h.expected(&mine, start);
    let deadline = tokio::time::Instant::now() + WITHIN;
    while receiver.verdicts().len() < expected.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} webhooks arrived",
            receiver.verdicts().len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    push.stop().await.unwrap();
    let verdicts = receiver.verdicts();
    assert!(
        verdicts.iter().all(|v| v["ok"] == true),
        "every signature verifies: {verdicts:?}"
    );
    let mut got: Vec<Cursor> = verdicts
        .iter()
        .map(|v| {
            v["id"]
                .as_str()
                .unwrap()
                .split('_')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    got.sort();
    assert_eq!(got, expected, "each matched trade delivered exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_ready_only_after_a_round_and_reports_the_leader() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let url = format!("http://{addr}/health");
    let deadline = tokio::time::Instant::now() + WITHIN;
    let body = loop {
        let r = reqwest::get(&url).await.unwrap();
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            status == 200,
            body["ready"] == true,
            "status follows readiness: {body}"
        );
        if status == 200 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body["last_round_ms"].as_i64().unwrap() > 0);
    assert!(body["epoch"].as_i64().unwrap() >= 1);
    push.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_detect_to_push_p50_matches_what_clients_observe() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    first_of(&mut c, "hello").await;
    h.sim
        .spawn(
            RunConfig {
                matches_per_block: 1,
                interval: Duration::from_millis(200),
                count: Some(30),
                duration: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap()
        .unwrap();
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // latency rows flushed (500 ms batches)
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    let mut client: Vec<i64> = seen
        .frames
        .iter()
        .filter(|f| f["type"] == "trade")
        .map(|f| f["_recv_ms"].as_i64().unwrap() - f["t_detect_ms"].as_i64().unwrap())
        .collect();
    client.sort_unstable();
    let client_p50 = client[client.len() / 2];

    let stats_cfg = pmw_stats::config::StatsConfig {
        stats_listen: "127.0.0.1:0".parse().unwrap(),
        stats_interval_ms: 200,
        ..pmw_stats::config::StatsConfig::default()
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let core = h.core();
    let stats = pmw_testkit::ServiceHandle::spawn(move |stop| {
        pmw_stats::run_with(core, stats_cfg, stop, Some(tx))
    });
    let saddr = tokio::time::timeout(WITHIN, rx).await.unwrap().unwrap();
    let deadline = tokio::time::Instant::now() + WITHIN;
    let json: serde_json::Value = loop {
        let r = reqwest::get(format!("http://{saddr}/latency.json"))
            .await
            .unwrap();
        if r.status() == 200 {
            let v: serde_json::Value = r.json().await.unwrap();
            if v["headline"]["figures"][0]["count"].as_u64().unwrap_or(0) > 0 {
                break v;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dashboard figures"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stats.stop().await.unwrap();
    let fig = &json["headline"]["figures"][0];
    assert_eq!(fig["window"], "1h");
    let dash_p50 = fig["p50_ms"].as_i64().unwrap();
    println!(
        "dashboard detect→push (WS) p50 {dash_p50} ms over {} deliveries; client-observed p50 {client_p50} ms over {} trades",
        fig["count"],
        client.len()
    );
    assert_eq!(
        fig["count"].as_u64().unwrap(),
        client.len() as u64,
        "one dashboard row per frame the client got"
    );
    // The server stamps t_push_ms just before the write; the client reads after: the client's
    // figure can only be later, by the socket hop.
    assert!(
        client_p50 >= dash_p50,
        "client {client_p50} ms < dashboard {dash_p50} ms"
    );
}
