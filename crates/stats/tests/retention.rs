//! Retention drops whole latency partitions past the 30-day window plus its margin, on the real
//! ClickHouse, and never touches trades.

mod common;

use std::time::Duration;

use common::*;
use pmw_core::store::trades::{self, TradeRow};
use pmw_core::store::Window;
use pmw_core::{Cursor, UnixMs};
use pmw_stats::retention;
use pmw_testkit::TestDb;

fn trade(block: u64, t_ms: i64) -> TradeRow {
    TradeRow {
        block_number: block,
        log_index: 0,
        block_hash: format!("0x{block:064x}"),
        tx_hash: format!("0x{:064x}", block + 7),
        block_time_ms: t_ms,
        exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        exchange_version: 1,
        order_hash: format!("0x{:064x}", block + 9),
        maker: "0x00000000000000000000000000000000000000aa".into(),
        taker: "0x00000000000000000000000000000000000000bb".into(),
        side: 0,
        token_id: "123".into(),
        shares: "10.000000".into(),
        collateral: "5.000000".into(),
        price: "0.5".into(),
        fee: "0.000000".into(),
        fee_asset: "collateral".into(),
        t_detect_ms: t_ms,
        backfilled: 0,
        retracted: 0,
        version: 1,
    }
}

async fn ingest_times(db: &TestDb) -> Vec<i64> {
    let all = Window {
        from_ms: i64::MIN / 2,
        to_ms: i64::MAX / 2,
    };
    let mut t: Vec<i64> = pmw_core::store::latency::ingest_in_window(&db.ch, all)
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while ingest_times(&db).await.len() != kept.len() || push_times(&db).await.len() != kept.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the service's retention job did not drop the 45-day-old partition"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(all_trades(&db).await, trades_before, "trades untouched");
    svc.stop().await.unwrap();
}
