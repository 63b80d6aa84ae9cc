//! What clients, receivers and the dashboard observe: client-side latency and heartbeats, each
//! matched trade delivered once as a webhook verified by the official library, and pmw-stats'
//! detect→push median against what a client measured.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_testkit::hooks::PyReceiver;
use pmw_testkit::{assert_eventually, eventually_every};

use super::WITHIN;
use crate::harness::{connect, first_of, hello_cursor, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_trades_report_client_observed_latency_and_carry_heartbeats() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (account, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.trade(1, Duration::from_millis(250), 20).await;
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
async fn webhooks_deliver_each_matched_trade_once_verified_by_the_official_library() {
    let h = Harness::new().await;
    let (push, _addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[0], demo_wallets(6)[3]];
    let (account, _key) = h.account(&mine).await;
    let secret = pmw_push::webhook::sign::Secret::generate();
    let receiver = PyReceiver::start(&secret.expose()).await;
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
    assert_eventually!(
        WITHIN,
        receiver.verdicts().len() >= expected.len(),
        "{} of {} webhooks arrived",
        receiver.verdicts().len(),
        expected.len()
    );
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
async fn the_dashboard_detect_to_push_p50_matches_what_clients_observe() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    first_of(&mut c, "hello").await;
    h.trade(1, Duration::from_millis(200), 30).await;
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
    let core = h.core();
    let (stats, saddr) = pmw_testkit::ServiceHandle::start_bound(WITHIN, move |stop, bound| {
        pmw_stats::run_with(core, stats_cfg, stop, Some(bound))
    })
    .await;
    let figures = eventually_every(WITHIN, Duration::from_millis(200), || async {
        let r = reqwest::get(format!("http://{saddr}/latency.json"))
            .await
            .unwrap();
        if r.status() != 200 {
            return None;
        }
        let v: serde_json::Value = r.json().await.unwrap();
        (v["headline"]["figures"][0]["count"].as_u64().unwrap_or(0) > 0).then_some(v)
    })
    .await;
    let json = figures.expect("no dashboard figures");
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

/// The webhook lane runs behind the WebSocket rounds on its own cursor: while its cursor row is
/// locked by another transaction (its rounds cannot commit), WebSocket clients still get every
/// trade; once released, the webhooks follow, each trade once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_held_up_never_hold_up_websocket_frames() {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[1], demo_wallets(6)[4]];
    let (account, key) = h.account(&mine).await;
    let secret = pmw_push::webhook::sign::Secret::generate();
    let receiver = PyReceiver::start(&secret.expose()).await;
    let c = h.db.connect().await;
    let now = pmw_core::UnixMs::now().0;
    c.execute(
        "INSERT INTO webhook_endpoints (account_id, url, secret, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $4)",
        &[&account, &receiver.url(), &secret.expose(), &now],
    )
    .await
    .unwrap();
    let mut ws = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut ws).await;

    // Hold the webhook lane: its cursor row locked, so its rounds wait at their UPDATE.
    let mut blocker = h.db.connect().await;
    let hold = blocker.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM webhook_cursor WHERE slot = 0 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    h.sim.run_matches(8).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let expected = h.expected(&mine, start);
    assert!(
        !expected.is_empty(),
        "the run has trades of the followed wallets"
    );
    let (live, events) = (Cell::new(0), RefCell::new(&mut ws.events));
    let all_live = eventually_every(WITHIN, Duration::from_millis(100), || async {
        while let Ok(f) = events.borrow_mut().try_recv() {
            live.set(live.get() + usize::from(f["type"] == "trade"));
        }
        live.get() >= expected.len()
    })
    .await;
    assert!(
        all_live,
        "{} of {} WebSocket trades while webhooks were held",
        live.get(),
        expected.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = receiver.verdicts().len();
    assert_eq!(held, 0, "no webhook can be queued while the lane is held");

    // Release: the lane catches up, every trade once.
    hold.rollback().await.unwrap();
    assert_eventually!(
        WITHIN,
        receiver.verdicts().len() >= expected.len(),
        "{} of {} webhooks after the lane was released",
        receiver.verdicts().len(),
        expected.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    push.stop().await.unwrap();
    let seen = ws.done.await.unwrap();
    assert_eq!(seen.trades, expected, "every WebSocket trade, in order");
    let mut got: Vec<Cursor> = receiver
        .verdicts()
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
    assert_eq!(got, expected, "each webhook once, after the release");
    println!(
        "lanes: {} WebSocket trades while the webhook lane was held (0 webhooks), then {} webhooks",
        seen.trades.len(),
        got.len()
    );
}
