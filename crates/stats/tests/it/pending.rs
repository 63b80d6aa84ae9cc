//! The pending tier's figures in `/latency.json` and on the page, from inputs written through
//! the production write paths: pmw-live's own statements for the pending tables (a settlement
//! recorded, a void) and the block commit's pairing function (migration 0023), push's fact
//! recorder for the `push_latency` rows (pending pushes and delivered trades). Every expected
//! figure is computed here from the planned raw times, never read back from the stores.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pmw_core::ch::PushLatencyRow;
use pmw_core::UnixMs;
use pmw_session::recorder::{Fact, Recorder};
use pmw_stats::StatsConfig;
use pmw_testkit::TestDb;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::common::*;

const REASONS: [&str; 4] = ["reverted", "replaced", "dropped", "expired"];

fn no_sampler() -> StatsConfig {
    StatsConfig {
        stats_availability_sampler: false,
        ..stats_config(3_600_000)
    }
}

/// How one planned pending settlement ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Confirmed,
    Void(&'static str),
    Open,
}

/// One planned settlement: its fills' ids (from the store), how and when it ended.
struct Planned {
    fills: Vec<i64>,
    end: End,
    end_ms: i64,
}

/// Records a settlement of `n` fills first seen at `first_seen` with pmw-live's statement;
/// returns the fills' ids in emit order.
async fn record(db: &TestDb, tx: &str, n: usize, first_seen: i64) -> Vec<i64> {
    let c = db.pg.get().await.unwrap();
    let fills: Vec<Value> = (0..n)
        .map(|i| {
            json!({"fill_index": i, "order_hash": format!("{tx}-o{i}"), "maker": "0xmaker",
                   "taker": "0xtaker", "token_id": "7", "side": 0, "making": "10.000000",
                   "taking": "20.000000", "exchange": "0xexchange"})
        })
        .collect();
    let sql = include_str!("../../../live/src/sql/pending_record.sql");
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &tx,
        &"0xsender",
        &1i64,
        &"0xexchange",
        &first_seen,
        &"p1",
        &tokio_postgres::types::Json(&fills),
        &first_seen,
    ];
    let events: i64 = c.query_one(sql, &params).await.unwrap().get(0);
    assert_eq!(events, n as i64);
    let rows = c
        .query(
            "SELECT id FROM pending_fills WHERE tx_hash = $1 ORDER BY fill_index",
            &[&tx],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Ends `tx` the way pmw-live does: the block commit's pairing (every fill confirmed) or the
/// resolution's void statement.
async fn end(db: &TestDb, tx: &str, n: usize, end: End, at_ms: i64) {
    let c = db.pg.get().await.unwrap();
    match end {
        End::Confirmed => {
            let trades: Vec<Value> = (0..n)
                .map(|i| {
                    json!({"tx_hash": tx, "order_hash": format!("{tx}-o{i}"), "side": 0,
                           "shares": "20.000000", "collateral": "10.000000"})
                })
                .collect();
            let paired = c
                .query(
                    "SELECT * FROM pmw_pending_confirm($1::jsonb, 100, 5, $2)",
                    &[&tokio_postgres::types::Json(&trades), &at_ms],
                )
                .await
                .unwrap();
            assert_eq!(paired.len(), n, "every fill paired");
        }
        End::Void(reason) => {
            // The ledger's block 5, the watermark the void is judged at (it ends nothing
            // unless the ledger still holds that block under the hash judged against).
            c.execute(
                "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, \
                 t_detect_ms, backfilled, trade_count) VALUES (5, '0xb5', '0xb4', 0, 0, false, 0) \
                 ON CONFLICT DO NOTHING",
                &[],
            )
            .await
            .unwrap();
            let sql = include_str!("../../../live/src/sql/pending_void.sql");
            let voided: i64 = c
                .query_one(sql, &[&tx, &reason, &5i64, &at_ms, &"0xb5"])
                .await
                .unwrap()
                .get(0);
            assert_eq!(voided, n as i64);
        }
        End::Open => {}
    }
}

fn row(channel: &str, pos: (u64, u32), t: (i64, i64), pending_id: i64) -> PushLatencyRow {
    PushLatencyRow {
        block_number: pos.0,
        log_index: pos.1,
        channel: channel.to_string().into(),
        target_id: 1,
        t_detect_ms: t.0,
        t_push_ms: t.1,
        epoch: 1,
        backfilled: 0,
        attempt: u32::from(channel.starts_with("webhook")),
        pending_id: pending_id as u64,
    }
}

/// Writes `rows` through push's fact recorder (one background writer, batched) and waits for it.
async fn through_recorder(db: &TestDb, rows: &[PushLatencyRow]) {
    let recorder = Recorder::spawn(db.ch.clone(), CancellationToken::new());
    for r in rows {
        recorder.record(Fact::Latency(r.clone()));
    }
    recorder.close(Duration::from_secs(30)).await;
    assert_eq!(
        recorder
            .stats()
            .write_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// A deterministic scatter.
fn spread(i: i64, salt: i64) -> i64 {
    (i * 37 + salt) % 53
}

/// Plans settlements (the first `recent` in the last hour, the rest ~5 h ago), records them,
/// ends them, and writes the pushes of their pendings and the deliveries of their trades
/// (plus trades with no pending first). Returns the plan and the rows written.
async fn plant(db: &TestDb, now: i64) -> (Vec<Planned>, Vec<PushLatencyRow>) {
    let (recent, total) = (24i64, 31i64);
    let mut plan = Vec::new();
    let mut rows = Vec::new();
    // The last two are seen just before the last hour and end (one confirmed, one dropped)
    // minutes into it: their ends and trades are the hour's, their pushes are not.
    for i in 0..total + 2 {
        let boundary = i >= total;
        let first_seen = match i {
            _ if boundary => now - HOUR - 30_000 - (i - total) * 1_000,
            _ if i < recent => now - 50 * 60_000 + i * 60_000,
            _ => now - 5 * HOUR + i * 60_000,
        };
        let n = 1 + usize::from(i % 3 == 0);
        let tx = format!("0x{i:064x}");
        let fills = record(db, &tx, n, first_seen).await;
        let end_kind = match i % 5 {
            _ if i == total => End::Confirmed,
            _ if boundary => End::Void("dropped"),
            0 => End::Void(REASONS[(i as usize / 5) % 4]),
            4 if i == 4 => End::Open,
            _ => End::Confirmed,
        };
        let end_ms = if boundary {
            now - HOUR + 5 * 60_000
        } else {
            first_seen + 2_500 + spread(i, 3)
        };
        end(db, &tx, n, end_kind, end_ms).await;
        let header = if boundary {
            end_ms - 500
        } else {
            first_seen + 1_800 + spread(i, 11) * 9
        };
        for (k, id) in fills.iter().enumerate() {
            let k64 = k as i64;
            // To two sessions, one of them slower; to a webhook endpoint for every other fill.
            let pushed = first_seen + 2 + spread(i + k64, 5);
            rows.push(row("ws_pending", (0, 0), (first_seen, pushed), *id));
            rows.push(row(
                "ws_pending",
                (0, 0),
                (first_seen, pushed + 7 + k64),
                *id,
            ));
            if i % 2 == 0 {
                let hook = first_seen + 30 + spread(i, 17) * 4;
                rows.push(row("webhook_pending", (0, 0), (first_seen, hook), *id));
            }
            if end_kind == End::Confirmed {
                let pos = (1_000 + i as u64, k as u32);
                rows.push(row("ws", pos, (header, header + 40 + k64), *id));
                if i % 3 == 1 {
                    rows.push(row("webhook", pos, (header, header + 300), *id));
                }
            }
        }
        plan.push(Planned {
            fills,
            end: end_kind,
            end_ms,
        });
    }
    // Trades with no pending first: 9 recent, 4 older; one delivered on both channels.
    for j in 0..13i64 {
        let t = if j < 9 {
            now - 40 * 60_000 + j * 1_000
        } else {
            now - 6 * HOUR + j * 1_000
        };
        rows.push(row("ws", (5_000 + j as u64, 0), (t, t + 35), 0));
        if j == 0 {
            rows.push(row("webhook", (5_000, 0), (t, t + 250), 0));
        }
    }
    through_recorder(db, &rows).await;
    (plan, rows)
}

/// What the window `[from, to)` must show, computed from the plan and the rows.
fn expected(plan: &[Planned], rows: &[PushLatencyRow], from: i64, to: i64) -> Value {
    let inside = |t: i64| t >= from && t < to;
    let diffs = |channel: &str| -> Vec<i64> {
        rows.iter()
            .filter(|r| r.channel == channel && inside(r.t_push_ms))
            .map(|r| r.t_push_ms - r.t_detect_ms)
            .collect()
    };
    let pct = |v: &[i64]| {
        json!({"count": v.len(), "p50_ms": rank(v, 0.5), "p95_ms": rank(v, 0.95),
               "p99_ms": rank(v, 0.99)})
    };
    // Lead: per fill with a pending push and a trade delivery inside.
    let mut pushed: BTreeMap<u64, i64> = BTreeMap::new();
    let mut header: BTreeMap<u64, i64> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| inside(r.t_push_ms) && r.pending_id > 0)
    {
        let (map, t) = if r.channel.ends_with("_pending") {
            (&mut pushed, r.t_push_ms)
        } else {
            (&mut header, r.t_detect_ms)
        };
        let e = map.entry(r.pending_id).or_insert(t);
        *e = (*e).min(t);
    }
    let leads: Vec<i64> = header
        .iter()
        .filter_map(|(id, h)| pushed.get(id).map(|p| h - p))
        .collect();
    // Coverage: distinct trade positions delivered inside, and those naming a pending.
    let mut trades: BTreeMap<(u64, u32), bool> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| inside(r.t_push_ms) && (r.channel == "ws" || r.channel == "webhook"))
    {
        *trades.entry((r.block_number, r.log_index)).or_default() |= r.pending_id > 0;
    }
    let covered = trades.values().filter(|c| **c).count() as u64;
    let share = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
    // Ends: fills whose end time lies inside.
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for p in plan.iter().filter(|p| inside(p.end_ms)) {
        let key = match p.end {
            End::Confirmed => "confirmed",
            End::Void(r) => r,
            End::Open => continue,
        };
        *by.entry(key).or_default() += p.fills.len() as u64;
    }
    let count: u64 = by.values().sum();
    let confirmed = by.get("confirmed").copied().unwrap_or(0);
    let reasons: Vec<Value> = REASONS
        .iter()
        .map(|r| {
            let n = by.get(r).copied().unwrap_or(0);
            json!({"reason": r, "count": n, "share": share(n, count)})
        })
        .collect();
    json!({
        "seen_push_ws": pct(&diffs("ws_pending")),
        "seen_push_webhook": pct(&diffs("webhook_pending")),
        "lead_over_header": {"count": leads.len(), "p50_ms": rank(&leads, 0.5),
                             "p90_ms": rank(&leads, 0.9)},
        "coverage": {"trades": trades.len(), "with_pending": covered,
                     "share": share(covered, trades.len() as u64)},
        "ended": {"count": count, "confirmed": confirmed, "voided": count - confirmed,
                  "void_share": share(count - confirmed, count), "voided_by_reason": reasons},
    })
}

/// Equal, shares within float parsing's last bit (the served JSON goes through text).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-12
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

fn pending_window<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["pending"]["windows"]
        .as_array()
        .unwrap_or_else(|| panic!("pending windows in {json}"))
        .iter()
        .find(|w| w["window"] == name)
        .unwrap_or_else(|| panic!("pending window {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_figures_are_those_of_the_raw_pushes_trades_and_ends() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let (plan, rows) = plant(&db, now.0).await;
    let (svc, addr) = start(db.cfg.clone(), no_sampler()).await;
    let json = json_after(addr, now.0).await;
    assert_eq!(json["pending"]["tier"], "on", "{}", json["pending"]);
    for name in ["1h", "24h"] {
        let got = pending_window(&json, name);
        let (from, to) = (
            got["from_ms"].as_i64().unwrap(),
            got["to_ms"].as_i64().unwrap(),
        );
        assert_eq!(to, json["generated_at_ms"].as_i64().unwrap() + 1);
        let want = expected(&plan, &rows, from, to);
        for key in [
            "seen_push_ws",
            "seen_push_webhook",
            "lead_over_header",
            "coverage",
            "ended",
        ] {
            assert!(
                same(&got[key], &want[key]),
                "{name} {key}: got {} want {}",
                got[key],
                want[key]
            );
        }
    }
    // The data set separates the windows and exercises every figure.
    let (h1, h24) = (pending_window(&json, "1h"), pending_window(&json, "24h"));
    assert!(h1["coverage"]["trades"].as_u64() < h24["coverage"]["trades"].as_u64());
    let share = h1["coverage"]["share"].as_f64().unwrap();
    assert!(share > 0.5 && share < 1.0, "{share}");
    assert!(h1["lead_over_header"]["p50_ms"].as_i64().unwrap() > 1_000);
    let reasons: BTreeSet<&str> = h24["ended"]["voided_by_reason"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["count"].as_u64() > Some(0))
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons.len(),
        4,
        "every reason voided at least once: {reasons:?}"
    );
    // The headline stays the confirmed path's: trade rows only.
    let ws_trades = rows
        .iter()
        .filter(|r| r.channel == "ws" && r.t_push_ms >= now.0 - HOUR)
        .count() as u64;
    assert_eq!(
        window(&json, "1h")["stages"]["detect_push_ws"]["count"].as_u64(),
        Some(ws_trades)
    );

    // The page shows the same figures.
    let (status, page) = get(&format!("http://{addr}/latency")).await;
    assert_eq!(status, 200);
    let card = format!(
        "data-window=\"1h\" data-seen-p50-ms=\"{}\" data-lead-p50-ms=\"{}\" data-coverage=\"{}\"",
        h1["seen_push_ws"]["p50_ms"], h1["lead_over_header"]["p50_ms"], share
    );
    assert!(page.contains(&card), "{card} in the page");
    assert!(!page.contains("The pending tier is off"));
    svc.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_pending_data_the_tier_is_off_not_zero_coverage() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let t = now.0 - 20 * 60_000;
    let trades: Vec<PushLatencyRow> = (0..5u64)
        .map(|b| row("ws", (100 + b, 0), (t, t + 30), 0))
        .collect();
    through_recorder(&db, &trades).await;
    let (svc, addr) = start(db.cfg.clone(), no_sampler()).await;
    let json = json_after(addr, now.0).await;
    let p = &json["pending"];
    assert_eq!(p["tier"], "off", "{p}");
    let h1 = pending_window(&json, "1h");
    assert_eq!(h1["coverage"]["trades"].as_u64(), Some(5));
    assert!(h1["coverage"]["share"].is_null(), "not measured: {h1}");
    assert!(h1["seen_push_ws"]["p50_ms"].is_null(), "{h1}");
    let (_, page) = get(&format!("http://{addr}/latency")).await;
    assert!(page.contains("The pending tier is off"), "{page}");
    assert!(
        !page.contains("had a pending first"),
        "no coverage shown while off"
    );
    svc.stop().await.unwrap();

    // One settlement seen (still open), the trades still without a pending first: the tier is
    // on and 0 % coverage is a real figure (what the alert is about).
    record(&db, &format!("0x{:064x}", 1), 1, now.0 - 60_000).await;
    let later = UnixMs::now();
    let (svc, addr) = start(db.cfg.clone(), no_sampler()).await;
    let json = json_after(addr, later.0).await;
    assert_eq!(json["pending"]["tier"], "on");
    assert_eq!(
        pending_window(&json, "1h")["coverage"]["share"].as_f64(),
        Some(0.0)
    );
    let (_, page) = get(&format!("http://{addr}/latency")).await;
    assert!(
        page.contains("<b>0.0 %</b> of 5 delivered trades"),
        "{page}"
    );
    svc.stop().await.unwrap();
}
