//! The WebSocket stream with pmw-sim trading and pmw-live ingesting: per-user ledger order under
//! concurrency, resume without gap or duplicate, slow consumers, a killed LISTEN session, bad
//! credentials, reorg retractions.

use std::time::Duration;

use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_sim::RunConfig;
use pmw_testkit::{eventually, eventually_every};
use tokio_util::sync::CancellationToken;

use super::WITHIN;
use crate::harness::{
    connect, first_of, hello_cursor, never_reading, strictly_increasing, Harness,
};

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
    h.trade(4, Duration::ZERO, 60).await;
    h.wait_pushed(WITHIN).await;
    let after = Cursor {
        block: start,
        log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
    };
    for (ws, c) in &users {
        c.wait_trades(&h.expected(ws, after), WITHIN).await;
    }
    push.stop().await.unwrap();
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
    let last = *got.last().unwrap();
    // Trades go by while it is away: push delivers one of these wallets' trades after the seam.
    let missed = eventually(WITHIN, || async {
        let pushed = h.pushed().await.unwrap_or(0);
        h.expected(&mine, last)
            .first()
            .is_some_and(|c| c.block <= pushed)
    })
    .await;
    assert!(
        missed,
        "no trade of these wallets went by while disconnected"
    );
    let c2 = connect(addr, &key, Some(last)).await;
    run.await.unwrap().unwrap();
    h.wait_pushed(WITHIN).await;
    c2.wait_trades(&h.expected(&mine, last), WITHIN).await;
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
    let slow = never_reading(addr, &key).await;
    let mut fast = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut fast).await;
    h.trade(2, Duration::ZERO, 300).await;
    h.wait_pushed(WITHIN).await;
    fast.wait_trades(&h.expected(&mine, start), WITHIN).await;
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
    let sessions = || async {
        let n: i64 = c
            .query_one("SELECT coalesce((state->>'sessions')::bigint, -1) FROM heartbeats WHERE service = 'pmw-push' AND instance = 'push-a'", &[])
            .await
            .unwrap()
            .get(0);
        n
    };
    let every = Duration::from_millis(200);
    if !eventually_every(WITHIN, every, || async { sessions().await == 1 }).await {
        panic!("slow session still registered ({})", sessions().await);
    }
    1
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
    // Push goes on after the kill: its cursor reaches the head and the client every trade.
    h.wait_pushed(WITHIN).await;
    c.wait_trades(&h.expected(&mine, start), WITHIN).await;
    assert!(
        !push.is_finished(),
        "a lost LISTEN session is reconnected, not fatal"
    );
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(seen.trades, h.expected(&mine, start));
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
        let c = crate::harness::connect_url(&url, k).await;
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
    let retracts = |frames: &[serde_json::Value]| -> std::collections::BTreeSet<(String, String)> {
        frames
            .iter()
            .filter(|f| f["type"] == "retract")
            .map(|f| {
                (
                    f["cursor"].as_str().unwrap().to_string(),
                    f["trade"]["block_hash"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
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
    // Every orphaned trade retracted and the new branch delivered, then stop.
    c.wait_seen(WITHIN, "the orphaned trades' retractions", |s| {
        retracts(&s.frames).is_superset(&orphaned)
    })
    .await;
    c.wait_trades(&h.expected(&mine, start), WITHIN).await;
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    let retracted = retracts(&seen.frames);
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

/// While ClickHouse does not answer, a resume within the hot ledger's window is served from
/// Postgres, every trade in order; a resume reaching below the hot ledger's floor (history read
/// from ClickHouse) is closed 1013 "try again later", never 1011, and once ClickHouse is back the
/// same resume gets every trade, in order, nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_while_clickhouse_is_down_is_served_from_the_hot_ledger_and_1013_below_it() {
    let h = Harness::new().await;
    let url = url::Url::parse(&h.db.cfg.clickhouse_url).unwrap();
    let ch = pmw_testkit::TcpProxy::start(
        format!(
            "{}:{}",
            url.host_str().unwrap(),
            url.port_or_known_default().unwrap()
        )
        .parse()
        .unwrap(),
    )
    .await;
    let mut core = h.core();
    core.clickhouse_url = format!("http://{}", ch.addr);
    let (push, addr) = crate::harness::start_push(
        core,
        "push-a",
        h.push_config(),
        pmw_push::webhook::WebhookConfig::default(),
    )
    .await;
    let mine = demo_wallets(6)[..2].to_vec();
    let (_, key) = h.account(&mine).await;
    h.sim.run_matches(6).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let expected = h.expected(&mine, Cursor::ORIGIN);
    assert!(!expected.is_empty(), "the account follows traded wallets");

    ch.cut();
    let got = replay_all(addr, &key, expected.len()).await;
    assert_eq!(
        got, expected,
        "served from the hot ledger with clickhouse cut"
    );

    // The same history older than the hot window (the floor raised past it once projected):
    // ClickHouse is needed, and it is down.
    let pg = h.db.connect().await;
    let projected = pmw_testkit::eventually(WITHIN, || async {
        let r = pg
            .query_one(
                "SELECT s.seq, h.seq FROM stored_cursor s, ledger_head h",
                &[],
            )
            .await
            .unwrap();
        r.get::<_, i64>(0) == r.get::<_, i64>(1)
    })
    .await;
    assert!(projected, "the projector caught up");
    let wm = pmw_core::pg::watermark(&pg).await.unwrap().unwrap();
    pg.execute(
        "UPDATE stored_cursor SET floor_block = $1",
        &[&(wm as i64 + 1)],
    )
    .await
    .unwrap();
    let refused =
        tokio::time::timeout(WITHIN, connect(addr, &key, Some(Cursor::ORIGIN)).await.done)
            .await
            .expect("the session is closed while clickhouse is down")
            .unwrap();
    println!(
        "resume while clickhouse is cut: close {:?}",
        refused.close_code
    );
    assert_eq!(refused.close_code, Some(1013), "{refused:?}");
    assert!(refused.trades.is_empty(), "{refused:?}");

    ch.restore();
    let got = replay_all(addr, &key, expected.len()).await;
    assert_eq!(got, expected, "every trade once, in ledger order");
    push.stop().await.unwrap();
}

/// The cursors of the first `n` trades a session resuming from the origin receives.
async fn replay_all(addr: std::net::SocketAddr, key: &str, n: usize) -> Vec<Cursor> {
    let mut c = connect(addr, key, Some(Cursor::ORIGIN)).await;
    let mut got = Vec::new();
    while got.len() < n {
        let v = tokio::time::timeout(WITHIN, c.events.recv())
            .await
            .expect("the replay arrives")
            .expect("session open");
        if v["type"] == "trade" {
            got.push(v["cursor"].as_str().unwrap().parse::<Cursor>().unwrap());
        }
    }
    got
}
