//! The ClickHouse layer on two engines: the stack's ClickHouse 18.16 and a current ClickHouse
//! (chDB behind its HTTP interface, `tools/python/chdb_http.py`). The production code runs the
//! migration, writes the same data (ingested trades, a crash's re-insert, a reorg's retraction
//! rows, latency rows across a day boundary, availability samples, delivery attempts) and sends every statement of
//! `pmw_core::ch::statements` (checked from the statements the second engine received); each
//! read returns the same rows on both, and retention drops the same partitions.

use pmw_core::ch::availability::{self, AvailabilitySample};
use pmw_core::ch::delivery_log::{self, DeliveryLogRow};
use pmw_core::ch::latency::{self, IngestLatencyRow, PushLatencyRow};
use pmw_core::ch::trades::{self, TradeRow};
use pmw_core::ch::{self, ChClient};
use pmw_core::ch::{statements, Window};
use pmw_core::{migrate, Cursor, UnixMs};
use pmw_stats::sampler::{Observation, Sampler};
use pmw_stats::{query, retention};
use pmw_testkit::{ChdbServer, TestDb};
use serde::Deserialize;

use crate::common::{ingest, push, DAY, HOUR};

/// A day boundary (UTC day 20424 starts here); `NOW` is 40 minutes after it.
const BOUNDARY: i64 = 20_424 * DAY;
const NOW: i64 = BOUNDARY + 40 * 60_000;
const W1: &str = "0x00000000000000000000000000000000000000a1";
const W2: &str = "0x00000000000000000000000000000000000000a2";

/// The columns the API reads from `delivery_log`.
#[derive(Debug, PartialEq, clickhouse::Row, Deserialize)]
struct Attempt {
    delivery_id: String,
    attempt: u32,
    kind: String,
    block_number: u64,
    log_index: u32,
    t_attempt_ms: i64,
    duration_ms: i64,
    status_code: u16,
    outcome: String,
    error: String,
}

/// The columns the API reads for an endpoint's last error.
#[derive(Debug, PartialEq, clickhouse::Row, Deserialize)]
struct LastError {
    t_attempt_ms: i64,
    status_code: u16,
    outcome: String,
    error: String,
}

fn trade(block: u64, log: u32, branch: u8, maker: &str) -> TradeRow {
    TradeRow {
        block_number: block,
        log_index: log,
        block_hash: format!("0x{branch:02x}{block:062x}"),
        tx_hash: format!("0x{:064x}", block * 100 + u64::from(log)),
        block_time_ms: BOUNDARY - HOUR + block as i64 * 1_000,
        exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        exchange_version: 1 + (log % 2) as u8,
        order_hash: format!("0x{:064x}", block * 7 + u64::from(log)),
        maker: maker.into(),
        taker: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        side: (log % 2) as u8,
        token_id: "71321045679252212594626385532706912750332728571942532289631379312455583992563"
            .into(),
        shares: format!("{}.500000", log + 1),
        collateral: "0.250000".into(),
        price: "0.1".into(),
        fee: "0.000000".into(),
        fee_asset: "collateral".into(),
        t_detect_ms: BOUNDARY - HOUR + block as i64 * 1_000 + 300,
        backfilled: u8::from(block == 100),
        retracted: 0,
        version: 1,
        audit: 0,
    }
}

fn attempt(id: &str, n: u32, t: i64, status: u16, outcome: &str) -> DeliveryLogRow {
    DeliveryLogRow {
        delivery_id: id.into(),
        endpoint_id: 7,
        account_id: 3,
        attempt: n,
        kind: "trade".into(),
        block_number: 101,
        log_index: n,
        t_attempt_ms: t,
        duration_ms: 12,
        status_code: status,
        outcome: outcome.into(),
        error: if status == 0 {
            "timeout".into()
        } else {
            String::new()
        },
    }
}

/// The same writes and reads on one engine; every read's result, by name, in order.
async fn scenario(ch: &ChClient) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut rec = |name: &'static str, v: String| out.push((name, v));
    // Trades: blocks 100..=104, three fills each, two wallets; block 101 re-inserted (a crash
    // between insert and watermark).
    let rows: Vec<TradeRow> = (100..=104)
        .flat_map(|b| (0..3).map(move |l| trade(b, l, 0xaa, if l == 1 { W2 } else { W1 })))
        .collect();
    trades::insert_trades(ch, &rows).await.unwrap();
    let again: Vec<TradeRow> = rows
        .iter()
        .filter(|r| r.block_number == 101)
        .cloned()
        .collect();
    trades::insert_trades(ch, &again).await.unwrap();
    // A reorg of block 102: its rows retracted, the new branch's two fills inserted.
    let old_hash = trade(102, 0, 0xaa, W1).block_hash;
    let retracted = trades::retract_block(ch, 102, &old_hash, 10).await.unwrap();
    rec("retract_block", format!("{retracted:?}"));
    let again = trades::retract_block(ch, 102, &old_hash, 11).await.unwrap();
    rec("retract_block again", format!("{again:?}"));
    let new_branch: Vec<TradeRow> = (0..2).map(|l| trade(102, l, 0xbb, W1)).collect();
    trades::insert_trades(ch, &new_branch).await.unwrap();
    // Block 104 stored but never committed: retracted above watermark 103.
    let (above, top) = trades::retract_above(ch, 103, 20).await.unwrap();
    rec("retract_above", format!("{above:?} {top}"));
    let origin = Cursor {
        block: 0,
        log_index: 0,
    };
    let all = trades::trades_after(ch, origin, 104, 100).await.unwrap();
    assert_eq!(all.len(), 3 + 3 + 2 + 3, "visible trades: {all:?}");
    rec("trades_after", format!("{all:?}"));
    let mid = Cursor {
        block: 101,
        log_index: 1,
    };
    rec(
        "trades_after page",
        format!("{:?}", trades::trades_after(ch, mid, 104, 2).await),
    );
    rec(
        "trades_of_block old",
        format!("{:?}", trades::trades_of_block(ch, 102, &old_hash).await),
    );
    let new_hash = &new_branch[0].block_hash;
    rec(
        "trades_of_block new",
        format!("{:?}", trades::trades_of_block(ch, 102, new_hash).await),
    );
    let gone = trades::retracted_between(ch, 99, 104).await.unwrap();
    assert_eq!(gone.len(), 3 + 3, "retracted: {gone:?}");
    rec("retracted_between", format!("{gone:?}"));
    let latest = trades::latest_between(ch, 101, 102).await.unwrap();
    assert_eq!(latest.len(), 3 + 3 + 2, "latest versions: {latest:?}");
    rec("latest_between", format!("{latest:?}"));
    let wallets = [W1.to_string(), W2.to_string()];
    let through = Cursor {
        block: 104,
        log_index: 9,
    };
    for (name, w) in [("wallet both", &wallets[..]), ("wallet w2", &wallets[1..])] {
        let page = trades::wallet_trades_between(ch, w, origin, through, 4).await;
        rec(name, format!("{page:?}"));
    }
    // Followed markets: every fill of a token, whatever the wallet (all of this world's fills
    // trade one token; an unknown token finds none).
    let token = trade(101, 0, 0xaa, W1).token_id;
    for (name, tokens) in [
        ("token", vec![token]),
        ("token none", vec!["1".to_string()]),
    ] {
        let page = trades::token_trades_between(ch, &tokens, origin, through, 4).await;
        rec(name, format!("{page:?}"));
    }
    let c = Cursor {
        block: 101,
        log_index: 2,
    };
    rec(
        "ingested_ms",
        format!("{:?}", trades::ingested_ms(ch, c, "aa").await),
    );
    rec(
        "ingested_ms none",
        format!("{:?}", trades::ingested_ms(ch, c, "bb").await),
    );
    rec(
        "waiting",
        format!("{:?}", trades::waiting(ch, mid, 103).await),
    );

    // Push's round read de-duplicates small reads itself and leaves large ones to ClickHouse:
    // both answers must be the statement's. Blocks 300..=303, 40 fills each; 301 stored twice,
    // 302 retracted, two fills of 303 stored again with a newer version (an audit's re-insert).
    let many: Vec<TradeRow> = (300..=303)
        .flat_map(|b| (0..40).map(move |l| trade(b, l, 0xcc, if l % 3 == 0 { W2 } else { W1 })))
        .collect();
    trades::insert_trades(ch, &many).await.unwrap();
    let twice: Vec<TradeRow> = many
        .iter()
        .filter(|r| r.block_number == 301)
        .cloned()
        .collect();
    trades::insert_trades(ch, &twice).await.unwrap();
    trades::retract_block(ch, 302, &trade(302, 0, 0xcc, W1).block_hash, 30)
        .await
        .unwrap();
    let newer: Vec<TradeRow> = many
        .iter()
        .filter(|r| r.block_number == 303 && r.log_index < 2)
        .map(|r| TradeRow {
            version: 40,
            audit: 1,
            ..r.clone()
        })
        .collect();
    trades::insert_trades(ch, &newer).await.unwrap();
    let at = |block, log_index| Cursor { block, log_index };
    let mut compared = 0;
    for after in [
        origin,
        at(300, 5),
        at(301, 39),
        at(302, 999_999),
        at(303, 0),
    ] {
        for up_to in [302, 303] {
            for limit in [1, 3, 50, 200, 1_000] {
                let mine = trades::trades_after(ch, after, up_to, limit).await.unwrap();
                let theirs = trades::deduplicated_after(ch, after, up_to, limit)
                    .await
                    .unwrap();
                assert_eq!(mine, theirs, "after {after} up to {up_to} limit {limit}");
                compared += mine.len();
            }
        }
    }
    assert!(compared > 1_000, "the comparisons saw rows: {compared}");

    // Latency across the day boundary, a duplicate ingest row (FINAL), backfilled rows, rows
    // dated after now, and old days for retention.
    let mut ing: Vec<IngestLatencyRow> = (0..40)
        .map(|i| {
            ingest(
                1_000 + i,
                BOUNDARY - 30 * 60_000 + i as i64 * 90_000,
                40 + i as i64,
                90,
            )
        })
        .collect();
    ing.push(ing[3].clone());
    ing[5].backfilled = 1;
    ing.push(ingest(2_000, NOW + HOUR, 5, 6));
    for d in [45, 40, 31, 29] {
        ing.push(ingest(3_000 + d as u64, NOW - d * DAY, 7, 8));
    }
    latency::insert_ingest(ch, &ing).await.unwrap();
    let mut pushes: Vec<PushLatencyRow> = (0..40)
        .map(|i| {
            let t = BOUNDARY - 30 * 60_000 + i as i64 * 90_000;
            let channel = if i % 3 == 0 { "webhook" } else { "ws" };
            push(1_000 + i, channel, t, t + 3 + (i as i64 * 37) % 900)
        })
        .collect();
    pushes[7].backfilled = 1;
    // Some webhooks delivered by a retry: eventually delivered, not first attempt.
    for p in pushes
        .iter_mut()
        .filter(|p| p.channel == "webhook" && p.block_number % 2 == 0)
    {
        p.attempt = 2;
    }
    pushes.push(push(2_000, "ws", NOW, NOW + 2 * HOUR));
    pushes.push(push(2_001, "ws", NOW - 10, NOW - 20));
    // The pending tier: pendings pushed (WebSocket, webhook) and the trades that confirmed most.
    for i in 0..12u64 {
        let seen = BOUNDARY - 20 * 60_000 + i as i64 * 60_000;
        let channel = if i % 3 == 0 {
            "webhook_pending"
        } else {
            "ws_pending"
        };
        let mut p = push(0, channel, seen, seen + 4 + (i as i64 * 13) % 40);
        p.pending_id = 500 + i;
        pushes.push(p);
        if i % 4 != 0 {
            let mut t = push(4_000 + i, "ws", seen + 1_900, seen + 1_950 + i as i64);
            t.pending_id = 500 + i;
            pushes.push(t);
        }
    }
    for d in [50, 33, 2] {
        pushes.push(push(
            3_000 + d as u64,
            "ws",
            NOW - d * DAY,
            NOW - d * DAY + 5,
        ));
    }
    latency::insert_push(ch, &pushes).await.unwrap();
    availability::insert_samples(ch, &samples()).await.unwrap();
    let w = Window {
        from_ms: BOUNDARY - HOUR,
        to_ms: NOW + 1,
    };
    let window = latency::ingest_in_window(ch, w).await.unwrap();
    assert_eq!(window.len(), 40, "ingest rows in the window: {window:?}");
    rec("ingest_in_window", format!("{window:?}"));
    rec(
        "recent_ws",
        format!("{:?}", latency::recent(ch, "ws", w).await),
    );
    rec(
        "recent_webhook",
        format!("{:?}", latency::recent(ch, "webhook", w).await),
    );
    let snapshot = query::compute(ch, UnixMs(NOW)).await.unwrap();
    rec("stats snapshot", format!("{snapshot:#?}"));
    for nw in pmw_stats::model::windows(UnixMs(NOW)) {
        let w = pmw_stats::pending::window(ch, nw).await.unwrap();
        assert_eq!(w.lead_over_header.count, 9, "{w:?}");
        rec("pending window", format!("{w:?}"));
    }

    // Delivery attempts and their pages.
    let attempts = vec![
        attempt("d1", 1, NOW - 5_000, 0, "retry"),
        attempt("d1", 2, NOW - 4_000, 503, "retry"),
        attempt("d1", 3, NOW - 3_000, 200, "delivered"),
        attempt("d2", 1, NOW - 3_000, 200, "delivered"),
        attempt("d3", 1, NOW - 60 * DAY, 410, "failed"),
    ];
    latency::insert_all(ch, "delivery_log", &attempts)
        .await
        .unwrap();
    let first: Vec<Attempt> = delivery_log::page(ch, 7, &None, 3).await.unwrap();
    assert_eq!(first.len(), 3);
    let last = first.last().unwrap();
    let below = Some((last.t_attempt_ms, last.delivery_id.clone(), last.attempt));
    let second: Vec<Attempt> = delivery_log::page(ch, 7, &below, 3).await.unwrap();
    rec("delivery_log pages", format!("{first:?} {second:?}"));
    let health = delivery_log::health_counts(ch, 7, NOW - DAY).await.unwrap();
    assert_eq!((health.attempts, health.delivered), (4, 2));
    let last: Option<LastError> = delivery_log::last_error(ch, 7).await.unwrap();
    assert_eq!(last.as_ref().map(|l| l.status_code), Some(503));
    rec("delivery_log health", format!("{health:?} {last:?}"));

    // Retention: the same partitions dropped, the same rows left.
    let dropped = retention::drop_expired(ch, UnixMs(NOW), 32).await.unwrap();
    assert!(!dropped.is_empty());
    rec("drop_expired", format!("{dropped:?}"));
    let dropped = retention::drop_expired_delivery_log(ch, UnixMs(NOW), 30)
        .await
        .unwrap();
    rec("drop_expired_delivery_log", format!("{dropped:?}"));
    let ever = Window {
        from_ms: 0,
        to_ms: i64::MAX / 2,
    };
    let left = latency::ingest_in_window(ch, ever).await.unwrap();
    rec(
        "ingest left",
        format!(
            "{:?}",
            left.iter().map(|r| r.t_detect_ms).collect::<Vec<_>>()
        ),
    );
    let snapshot = query::compute(ch, UnixMs(NOW)).await.unwrap();
    rec("stats snapshot after retention", format!("{snapshot:#?}"));
    let pages: Vec<Attempt> = delivery_log::page(ch, 7, &None, 10).await.unwrap();
    rec("delivery_log after retention", format!("{pages:?}"));
    out
}

/// Availability samples across the day boundary (a push gap, an ingest gap, a hole) and on old
/// days (retention), through the sampler's own state machine.
fn samples() -> Vec<AvailabilitySample> {
    let mut sampler = Sampler::new();
    let mut out = Vec::new();
    let at = |t: i64| Observation {
        watermark: Some((10, t - 300)),
        push_block: Some(10),
        owed: None,
        live: Some((t - 100, Some(10))),
        ..Observation::default()
    };
    for i in 0..600i64 {
        if (200..260).contains(&i) {
            continue;
        }
        let t = BOUNDARY - 300_000 + i * 1_000;
        let mut o = at(t);
        if (100..130).contains(&i) {
            o.owed = Some((10, BOUNDARY - 200_000));
        }
        if (400..410).contains(&i) {
            o.live = Some((t - 100, Some(14)));
        }
        out.push(sampler.sample(t, Some(&o)));
    }
    for d in [45, 33, 2] {
        let t = NOW - d * DAY;
        out.push(sampler.sample(t, Some(&at(t))));
    }
    out
}

/// The second engine's client for the same database name (created there).
async fn chdb_db(server: &ChdbServer, db: &TestDb) -> ChClient {
    let mut cfg = db.cfg.clone();
    cfg.clickhouse_url = server.url();
    ch::server_client(&cfg)
        .query(&format!("CREATE DATABASE {}", db.name))
        .execute()
        .await
        .expect("create the database on chdb");
    ch::client(&cfg)
}

#[tokio::test]
async fn the_clickhouse_layer_gives_the_same_rows_on_18_16_and_a_current_clickhouse() {
    let server = ChdbServer::start().await;
    let db = TestDb::new().await;
    let old: String = db.ch.query("SELECT version()").fetch_one().await.unwrap();
    assert!(old.starts_with("18.16"), "the stack runs 18.16, not {old}");
    let major: u32 = server.version.split('.').next().unwrap().parse().unwrap();
    assert!(
        major >= 24,
        "chdb is a current ClickHouse: {}",
        server.version
    );
    let current = chdb_db(&server, &db).await;

    // Every migration applies (and a second run finds nothing to do); the schema check passes.
    let applied = migrate::migrate_clickhouse(&current).await.unwrap();
    assert_eq!(
        applied,
        migrate::CLICKHOUSE
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>()
    );
    assert!(migrate::migrate_clickhouse(&current)
        .await
        .unwrap()
        .is_empty());
    let pg = db.connect().await;
    for ch in [&db.ch, &current] {
        migrate::check_schema(&pg, ch).await.unwrap();
    }

    let a = scenario(&db.ch).await;
    let b = scenario(&current).await;
    assert_eq!(a.len(), b.len());
    let mut differ = Vec::new();
    for ((name, on_old), (_, on_current)) in a.iter().zip(&b) {
        if on_old != on_current {
            differ.push(format!(
                "{name}:\n  18.16:   {on_old}\n  {}: {on_current}",
                server.version
            ));
        }
    }
    assert!(differ.is_empty(), "results differ:\n{}", differ.join("\n"));

    // Every statement of the catalogue, and every migration statement, reached the engine.
    let sent = server.queries();
    for (name, template) in statements::ALL {
        assert!(
            sent.iter().any(|q| statements::made_from(template, q)),
            "{name} never ran on chdb"
        );
    }
    for m in migrate::CLICKHOUSE {
        for stmt in migrate::clickhouse_statements(m.sql) {
            let want = statements::normalize(&stmt);
            assert!(
                sent.iter().any(|q| statements::normalize(q) == want),
                "migration {} statement never ran on chdb: {want}",
                m.version
            );
        }
    }
}
