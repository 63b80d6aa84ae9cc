//! What clients, receivers and the dashboard observe: client-side latency and heartbeats, each
//! matched trade delivered once as a webhook verified by the official library, pmw-stats'
//! detect→push median against what a client measured, and a push outage in pmw-stats'
//! availability samples and figures.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_testkit::hooks::PyReceiver;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{assert_eventually, eventually, eventually_every, observe_for};

use super::WITHIN;
use crate::harness::{connect, hello_cursor, Harness};

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
    let owed = h.expected(&mine, start);
    c.wait_trades(&owed, WITHIN).await;
    c.wait_seen(WITHIN, "a heartbeat (every 1 s)", |s| {
        s.frames.iter().any(|f| f["type"] == "heartbeat")
    })
    .await;
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(seen.trades, owed);
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
    // One push_latency row per delivered frame, never before detection: wait for as many rows
    // as frames (they are written in batches), then no more than that.
    let latency_rows = || async {
        h.db.ch
            .query("SELECT t_detect_ms, t_push_ms FROM push_latency WHERE channel = 'ws' AND target_id = ?")
            .bind(account as u64)
            .fetch_all::<(i64, i64)>()
            .await
            .unwrap()
    };
    let rows = eventually(WITHIN, || async {
        Some(latency_rows().await).filter(|r| r.len() >= seen.trades.len())
    })
    .await
    .unwrap_or_default();
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
    Endpoint::new(account, &receiver.url(), &secret.expose())
        .created(pmw_core::UnixMs::now().0)
        .insert(&c)
        .await;
    c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    // No wait for the NOTIFY to be handled: each lane's round reads `subs_version` with its state
    // and reloads a stale index before it matches (push/index.rs proves it with the NOTIFY lost).
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
    // Negative check: no duplicate follows within the window ("exactly once" below).
    observe_for(Duration::from_millis(500)).await;
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
    let (account, key) = h.account(&mine).await;
    let mut c = connect(addr, &key, None).await;
    let start = hello_cursor(&mut c).await;
    h.trade(1, Duration::from_millis(200), 30).await;
    h.wait_pushed(WITHIN).await;
    // Every frame delivered, and its latency row flushed (500 ms batches) before push stops.
    let owed = h.expected(&mine, start);
    c.wait_trades(&owed, WITHIN).await;
    let flushed = eventually(WITHIN, || async {
        let n: u64 =
            h.db.ch
                .query("SELECT count() FROM push_latency WHERE channel = 'ws' AND target_id = ?")
                .bind(account as u64)
                .fetch_one()
                .await
                .unwrap();
        n >= owed.len() as u64
    })
    .await;
    assert!(
        flushed,
        "a latency row for each of the {} frames",
        owed.len()
    );
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
    Endpoint::new(account, &receiver.url(), &secret.expose())
        .created(pmw_core::UnixMs::now().0)
        .insert(&c)
        .await;
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
    // Negative check: no webhook arrives within the window while the lane is held.
    observe_for(Duration::from_millis(500)).await;
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
    // The WebSocket trades were all seen above; negative check: no webhook duplicate follows
    // within the window ("each webhook once" below).
    observe_for(Duration::from_millis(500)).await;
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

/// One availability sample as read back from ClickHouse.
#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct Sample {
    t_ms: i64,
    push_lag_ms: i64,
    push_ok: u8,
    ingest_ok: u8,
    watermark: u64,
    push_block: u64,
}

/// The first availability sample taken after `after_ms` that satisfies `pred`.
async fn sample_where(h: &Harness, after_ms: i64, pred: impl Fn(&Sample) -> bool) -> Sample {
    let found = eventually_every(WITHIN, Duration::from_millis(250), || async {
        let rows: Vec<Sample> =
            h.db.ch
                .query(
                    "SELECT t_ms, push_lag_ms, push_ok, ingest_ok, watermark, push_block \
                 FROM availability_samples WHERE t_ms > ? ORDER BY t_ms",
                )
                .bind(after_ms)
                .fetch_all()
                .await
                .unwrap();
        rows.into_iter().find(|s| pred(s))
    })
    .await;
    found.unwrap_or_else(|| panic!("no availability sample after {after_ms} as expected"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_push_outage_as_unavailable_time_and_its_gap() {
    let h = Harness::new().await;
    let stats_cfg = pmw_stats::config::StatsConfig {
        stats_listen: "127.0.0.1:0".parse().unwrap(),
        stats_interval_ms: 500,
        ..pmw_stats::config::StatsConfig::default()
    };
    let core = h.core();
    let (stats, saddr) = pmw_testkit::ServiceHandle::start_bound(WITHIN, move |stop, bound| {
        pmw_stats::run_with(core, stats_cfg, stop, Some(bound))
    })
    .await;
    let (push, _) = h.leader("push-a").await;
    let (_, _key) = h.account(&demo_wallets(6)).await;
    h.trade(1, Duration::from_millis(200), 10).await;
    h.wait_pushed(WITHIN).await;
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    // Push and ingest keep up: available.
    let up = sample_where(&h, 0, |s| s.watermark >= head && s.push_block >= head).await;
    assert_eq!(
        (up.push_ok, up.push_lag_ms, up.ingest_ok),
        (1, 0, 1),
        "{up:?}"
    );

    // Push stops while trades go on: once the oldest owed trade has waited over 5 s, push is
    // unavailable (ingest is not). Left down until it has waited 8 s: at least 3 s of gap.
    push.stop().await.unwrap();
    let stopped = pmw_core::UnixMs::now().0;
    h.trade(1, Duration::from_millis(200), 3).await;
    let first_down = sample_where(&h, stopped, |s| s.push_ok == 0).await;
    assert!(first_down.push_lag_ms > 5_000, "{first_down:?}");
    let down = sample_where(&h, stopped, |s| s.push_lag_ms > 8_000).await;
    assert_eq!(down.push_ok, 0, "{down:?}");
    assert!(down.watermark > down.push_block, "{down:?}");
    assert_eq!(down.ingest_ok, 1, "{down:?}");

    // Push back: it delivers what it owed and is available again.
    let (push, _) = h.leader("push-b").await;
    h.wait_pushed(WITHIN).await;
    let back = sample_where(&h, down.t_ms, |s| s.push_ok == 1).await;
    assert_eq!(back.push_lag_ms, 0, "{back:?}");

    // Ingest stayed available through the push outage (samples before push and live were up
    // at the start are not part of it).
    let ingest_down: u64 =
        h.db.ch
            .query("SELECT count() FROM availability_samples WHERE t_ms >= ? AND ingest_ok = 0")
            .bind(up.t_ms)
            .fetch_one()
            .await
            .unwrap();
    assert_eq!(ingest_down, 0);
    // The page's JSON: the outage's failing samples in the last hour's unavailable push time,
    // its run as the longest gap (at least first_down → down), never longer than the outage.
    let json = eventually_every(WITHIN, Duration::from_millis(250), || async {
        let r = reqwest::get(format!("http://{saddr}/latency.json"))
            .await
            .ok()?;
        let v: serde_json::Value = r.json().await.ok()?;
        let w = v["availability"]["windows"][0].clone();
        (v["generated_at_ms"].as_i64()? > back.t_ms).then_some(w)
    })
    .await
    .expect("a snapshot after the outage");
    assert_eq!(json["window"], "1h");
    let gap = json["push"]["longest_gap_ms"].as_i64().unwrap();
    let unavailable = json["push"]["unavailable_s"].as_u64().unwrap();
    println!(
        "push outage of {} ms: longest gap {gap} ms, {unavailable} s unavailable, {} s sampled",
        back.t_ms - stopped,
        json["sampled_s"]
    );
    assert!(gap >= down.t_ms - first_down.t_ms + 1_000, "{json}");
    assert!(gap <= back.t_ms - stopped, "{json}");
    // The longest wait: at least what the last failing sample saw, at most the outage.
    let waited = json["push_max_lag_ms"].as_i64().unwrap();
    assert!(
        waited >= down.push_lag_ms && waited <= back.t_ms - stopped,
        "{json}"
    );
    assert!(
        unavailable as i64 > (down.t_ms - first_down.t_ms) / 1_000,
        "{json}"
    );
    assert!(
        json["unknown_s"].as_u64().unwrap() > 3_000,
        "the hour before the test: {json}"
    );
    push.stop().await.unwrap();
    stats.stop().await.unwrap();
}
