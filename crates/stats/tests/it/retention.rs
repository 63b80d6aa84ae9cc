//! Retention drops whole latency partitions past the 30-day window plus its margin, on the real
//! ClickHouse, and never touches trades; it drops old `delivery_log` days, and deletes finished
//! `ws_claims` and `webhook_deliveries` rows past their retention from Postgres in bounded
//! batches, never open claims or pending deliveries.

use std::time::Duration;

use crate::common::*;
use pmw_core::ch::trades::{self, TradeRow};
use pmw_core::ch::Window;
use pmw_core::{Cursor, UnixMs};
use pmw_stats::purge::{self, RowRetention};
use pmw_stats::{retention, StatsConfig};
use pmw_testkit::{assert_eventually, TestDb};

fn trade(block: u64, t_ms: i64) -> TradeRow {
    TradeRow {
        block_time_ms: t_ms,
        t_detect_ms: t_ms,
        ..pmw_testkit::rows::trade(block, 0, &format!("0x{block:064x}"))
    }
}

async fn ingest_times(db: &TestDb) -> Vec<i64> {
    let all = Window {
        from_ms: i64::MIN / 2,
        to_ms: i64::MAX / 2,
    };
    let mut t: Vec<i64> = pmw_core::ch::latency::ingest_in_window(&db.ch, all)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.t_detect_ms)
        .collect();
    t.sort_unstable();
    t
}

async fn push_times(db: &TestDb) -> Vec<i64> {
    db.ch
        .query("SELECT t_push_ms FROM push_latency ORDER BY t_push_ms")
        .fetch_all::<i64>()
        .await
        .unwrap()
}

async fn all_trades(db: &TestDb) -> Vec<TradeRow> {
    trades::trades_after(&db.ch, Cursor::ORIGIN, u64::MAX / 2, 1_000_000)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_old_latency_partitions_and_leaves_trades() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let today = now.0.div_euclid(DAY) * DAY;
    // Partition ends relative to the cutoff (now − 32 d): dropped iff the whole day is older.
    let cutoff = now.0 - 32 * DAY;
    let old = [
        -3 * DAY - 5, // before 1970: a negative partition
        1,            // 1970-01-01
        now.0 - 400 * DAY,
        now.0 - 40 * DAY,
        cutoff.div_euclid(DAY) * DAY - 1, // last ms of the day before the cutoff's day
    ];
    let kept = [
        cutoff.div_euclid(DAY) * DAY, // the cutoff's own day still holds rows newer than it
        now.0 - 31 * DAY,
        now.0 - 29 * DAY - 1,
        today,
        now.0,
        FAR_FUTURE_MS, // not old: retention leaves it (it sits in no window, see diagnostics)
    ];
    let times: Vec<i64> = old.iter().chain(&kept).copied().collect();
    let ingest_rows: Vec<_> = times
        .iter()
        .enumerate()
        .map(|(i, t)| ingest(i as u64 + 1, *t, 5, 9))
        .collect();
    let push_rows: Vec<_> = times
        .iter()
        .enumerate()
        .map(|(i, t)| push(i as u64 + 1, "ws", t - 20, *t))
        .collect();
    write(&db, &ingest_rows, &push_rows).await;
    // Trades as old as the oldest latency rows.
    let trade_rows: Vec<TradeRow> = times
        .iter()
        .enumerate()
        .map(|(i, t)| trade(i as u64 + 1, *t))
        .collect();
    trades::insert_trades(&db.ch, &trade_rows).await.unwrap();
    let trades_before = all_trades(&db).await;
    assert_eq!(trades_before.len(), times.len());

    let dropped = retention::drop_expired(&db.ch, now, 32).await.unwrap();
    let mut expect_kept: Vec<i64> = kept.to_vec();
    expect_kept.sort_unstable();
    assert_eq!(ingest_times(&db).await, expect_kept, "old ingest rows gone");
    // Push rows are partitioned by t_push_ms (= the instants above).
    assert_eq!(push_times(&db).await, expect_kept, "old push rows gone");
    assert_eq!(dropped.len(), 2 * old.len(), "{dropped:?}");
    assert_eq!(all_trades(&db).await, trades_before, "trades untouched");
    let wallet_rows: u64 = db
        .ch
        .query("SELECT count() FROM trades_by_wallet")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(
        wallet_rows,
        times.len() as u64,
        "per-wallet trades untouched"
    );

    // Idempotent: a second run drops nothing.
    assert!(retention::drop_expired(&db.ch, now, 32)
        .await
        .unwrap()
        .is_empty());

    // The service runs the job at start.
    write(
        &db,
        &[ingest(500, now.0 - 45 * DAY, 5, 9)],
        &[push(
            500,
            "webhook",
            now.0 - 45 * DAY - 20,
            now.0 - 45 * DAY,
        )],
    )
    .await;
    let (svc, _addr) = start(db.cfg.clone(), stats_config(60_000)).await;
    assert_eventually!(
        Duration::from_secs(30),
        ingest_times(&db).await.len() == kept.len() && push_times(&db).await.len() == kept.len(),
        "the service's retention job did not drop the 45-day-old partition"
    );
    assert_eq!(all_trades(&db).await, trades_before, "trades untouched");
    svc.stop().await.unwrap();
}

/// Insert `n` ws_claims rows in `state`, claimed at `claimed_ms`, done at `done_ms`.
async fn claims(
    c: &tokio_postgres::Client,
    n: usize,
    state: &str,
    claimed_ms: i64,
    done_ms: Option<i64>,
) {
    for _ in 0..n {
        c.execute(
            "INSERT INTO ws_claims (slot, epoch, from_block, from_log, to_block, to_log, trades, state, claimed_ms, done_ms) \
             VALUES (0, 1, 1, 0, 2, 0, 1, $1, $2, $3)",
            &[&state, &claimed_ms, &done_ms],
        )
        .await
        .unwrap();
    }
}

/// Insert `n` webhook_deliveries rows of `endpoint` in `state`, created at `created_ms`, done at
/// `done_ms`; ids are `<prefix>-<i>`.
async fn deliveries(
    c: &tokio_postgres::Client,
    endpoint: i64,
    prefix: &str,
    n: usize,
    state: &str,
    created_ms: i64,
    done_ms: Option<i64>,
) {
    for i in 0..n {
        c.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, \
               state, attempts, next_attempt_ms, t_detect_ms, created_ms, done_ms) \
             VALUES ($1, $2, 'trade', 1, 0, '{}', $3, 1, $4, $4, $4, $5)",
            &[&format!("{prefix}-{i}"), &endpoint, &state, &created_ms, &done_ms],
        )
        .await
        .unwrap();
    }
}

async fn claim_states(c: &tokio_postgres::Client) -> Vec<(String, Option<i64>)> {
    c.query("SELECT state, done_ms FROM ws_claims ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn delivery_ids(c: &tokio_postgres::Client) -> Vec<String> {
    c.query("SELECT id FROM webhook_deliveries ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn log_attempt(db: &TestDb, id: &str, t_attempt_ms: i64) {
    db.ch
        .query(&format!(
            "INSERT INTO delivery_log (delivery_id, endpoint_id, account_id, attempt, kind, block_number, \
               log_index, t_attempt_ms, duration_ms, status_code, outcome, error) \
             VALUES ('{id}', 1, 1, 1, 'trade', 1, 0, {t_attempt_ms}, 3, 200, 'delivered', '')"
        ))
        .execute()
        .await
        .unwrap();
}

async fn log_times(db: &TestDb) -> Vec<i64> {
    db.ch
        .query("SELECT t_attempt_ms FROM delivery_log ORDER BY t_attempt_ms")
        .fetch_all::<i64>()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_finished_rows_in_batches_and_old_delivery_log_days() {
    let db = TestDb::new().await;
    let c = db.connect().await;
    let now = UnixMs::now();
    let account = pmw_testkit::seed::account(&c, "t", "free").await;
    let endpoint = pmw_testkit::seed::Endpoint::new(account, "http://127.0.0.1:9/hook", "whsec_x")
        .insert(&c)
        .await;

    // ws_claims, kept 1 day: 10 finished rows are older.
    claims(&c, 7, "delivered", now.0 - 3 * DAY, Some(now.0 - 2 * DAY)).await;
    claims(&c, 3, "voided", now.0 - 3 * DAY, Some(now.0 - 2 * DAY)).await;
    claims(&c, 2, "claimed", now.0 - 5 * DAY, None).await; // open: never purged
    claims(&c, 2, "delivered", now.0 - 2 * HOUR, Some(now.0 - HOUR)).await;
    // webhook_deliveries, kept 7 days: 9 finished rows are older.
    deliveries(
        &c,
        endpoint,
        "old-delivered",
        5,
        "delivered",
        now.0 - 9 * DAY,
        Some(now.0 - 8 * DAY),
    )
    .await;
    deliveries(
        &c,
        endpoint,
        "old-failed",
        4,
        "failed",
        now.0 - 9 * DAY,
        Some(now.0 - 8 * DAY),
    )
    .await;
    deliveries(
        &c,
        endpoint,
        "old-pending",
        2,
        "pending",
        now.0 - 30 * DAY,
        None,
    )
    .await;
    deliveries(
        &c,
        endpoint,
        "new-delivered",
        2,
        "delivered",
        now.0 - DAY,
        Some(now.0 - DAY),
    )
    .await;
    deliveries(
        &c,
        endpoint,
        "new-failed",
        1,
        "failed",
        now.0 - 6 * DAY,
        Some(now.0 - 6 * DAY),
    )
    .await;

    let keep = RowRetention {
        ws_claims: Duration::from_secs(86_400),
        webhook_deliveries: Duration::from_secs(7 * 86_400),
        batch: 4,
    };
    // The deletes are fenced by the stats writer epoch: without the lock (or with a deposed
    // holder's epoch) nothing is deleted.
    let none = tokio_util::sync::CancellationToken::new();
    let mut lock = pmw_core::lock::WriterLock::acquire(
        &db.cfg,
        "retention-test",
        pmw_core::lock::keys::STATS,
        Duration::from_millis(200),
        &none,
    )
    .await
    .unwrap()
    .expect("the stats lock");
    let epoch = lock.take_epoch("retention-test").await.unwrap();
    let fenced = purge::purge_finished(&db.pg, now, &keep, epoch - 1, &none)
        .await
        .unwrap();
    assert!(
        fenced.iter().all(|p| p.rows == 0),
        "a stale epoch deletes nothing: {fenced:?}"
    );
    let purged = purge::purge_finished(&db.pg, now, &keep, epoch, &none)
        .await
        .unwrap();
    let got: Vec<(&str, u64, u64)> = purged
        .iter()
        .map(|p| (p.table, p.rows, p.statements))
        .collect();
    // At most 4 rows per statement: 4 + 4 + 2 and 4 + 4 + 1.
    assert_eq!(got, [("ws_claims", 10, 3), ("webhook_deliveries", 9, 3)]);
    assert_eq!(
        claim_states(&c).await,
        [
            ("claimed".to_string(), None),
            ("claimed".to_string(), None),
            ("delivered".to_string(), Some(now.0 - HOUR)),
            ("delivered".to_string(), Some(now.0 - HOUR)),
        ]
    );
    assert_eq!(
        delivery_ids(&c).await,
        [
            "new-delivered-0",
            "new-delivered-1",
            "new-failed-0",
            "old-pending-0",
            "old-pending-1"
        ]
    );
    // Idempotent: one empty statement per table.
    let again = purge::purge_finished(&db.pg, now, &keep, epoch, &none)
        .await
        .unwrap();
    assert!(
        again.iter().all(|p| p.rows == 0 && p.statements == 1),
        "{again:?}"
    );

    // delivery_log, kept 30 days, by UTC day partitions.
    let cutoff = now.0 - 30 * DAY;
    let old = [now.0 - 40 * DAY, cutoff.div_euclid(DAY) * DAY - 1];
    let kept = [cutoff.div_euclid(DAY) * DAY, now.0 - 29 * DAY, now.0];
    for (i, t) in old.iter().chain(&kept).enumerate() {
        log_attempt(&db, &format!("msg_{i}"), *t).await;
    }
    // The latency job leaves delivery_log alone, even a 40-day-old day.
    retention::drop_expired(&db.ch, now, 32).await.unwrap();
    assert_eq!(log_times(&db).await.len(), old.len() + kept.len());
    let dropped = retention::drop_expired_delivery_log(&db.ch, now, 30)
        .await
        .unwrap();
    assert_eq!(dropped.len(), old.len(), "{dropped:?}");
    assert!(dropped.iter().all(|d| d.table == "delivery_log"));
    assert_eq!(log_times(&db).await, kept);

    // The service runs all of it at start, with its settings.
    claims(&c, 1, "voided", now.0 - 3 * DAY, Some(now.0 - 2 * DAY)).await;
    deliveries(
        &c,
        endpoint,
        "late-failed",
        1,
        "failed",
        now.0 - 9 * DAY,
        Some(now.0 - 8 * DAY),
    )
    .await;
    log_attempt(&db, "msg_late", now.0 - 45 * DAY).await;
    let stats = StatsConfig {
        stats_retention_batch: 1,
        ..stats_config(60_000)
    };
    let (svc, _addr) = start(db.cfg.clone(), stats).await;
    assert_eventually!(
        Duration::from_secs(30),
        claim_states(&c).await.len() == 4
            && delivery_ids(&c).await.len() == 5
            && log_times(&db).await == kept,
        "the service's retention job did not purge the old rows"
    );
    svc.stop().await.unwrap();
}
