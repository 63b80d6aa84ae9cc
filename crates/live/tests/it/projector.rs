//! The projector on the real Postgres and ClickHouse, without a chain: it copies the hot ledger
//! to ClickHouse in commit order behind a fenced stored_cursor, raises the hot ledger's floor
//! only past partitions that are projected, finalized and older than the window, drops them a
//! grace period later, and the one ledger reads the same across the seam and, above the
//! floor, while ClickHouse is down.

use std::time::Duration;

use pmw_core::ch::{trades, TradeRow};
use pmw_core::lock::{keys, WriterLock};
use pmw_core::pg::ledger;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::Cursor;
use pmw_live::projector::{Projector, Retained, Settings};
use pmw_testkit::rows::{plant, trade};
use pmw_testkit::TestDb;
use tokio_util::sync::CancellationToken;

const HOUR_MS: i64 = 3_600_000;

fn hash(block: u64) -> String {
    format!("0x{block:064x}")
}

/// A fill of wallet `w` (1 or 2) at (block, log).
fn fill(block: u64, log_index: u32, w: u8) -> TradeRow {
    let mut r = trade(block, log_index, &hash(block));
    r.maker = format!("0x{}", format!("{w:02x}").repeat(20));
    r
}

/// The rows planted in every test: two partitions' worth (blocks 5 and 9_999 below 10_000,
/// 10_005 above), one of them retracted later, and the blocks recorded old and finalized.
fn planted() -> Vec<TradeRow> {
    vec![
        fill(5, 0, 1),
        fill(5, 1, 2),
        fill(9_999, 3, 1),
        fill(10_005, 0, 1),
        fill(10_005, 2, 2),
    ]
}

async fn ledger_db() -> TestDb {
    let db = TestDb::new().await;
    let c = db.connect().await;
    plant(&c, &planted()).await;
    let mut gone = fill(5, 1, 2);
    (gone.retracted, gone.version) = (1, 2);
    plant(&c, &[gone]).await;
    let old = pmw_core::UnixMs::now().0 - 48 * HOUR_MS;
    for b in [5i64, 9_999, 10_005] {
        c.execute(
            "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled) VALUES ($1, $2, '', $3, $3, false)",
            &[&b, &hash(b as u64), &old],
        )
        .await
        .unwrap();
    }
    c.batch_execute(
        "INSERT INTO ingest_cursor VALUES (1, 10005, '', 0);
         INSERT INTO finalized_cursor VALUES (1, 10005, '', 0);
         UPDATE stored_cursor SET floor_block = 0",
    )
    .await
    .unwrap();
    db
}

async fn live_lock(db: &TestDb) -> WriterLock {
    let mut lock = WriterLock::acquire(
        &db.cfg,
        "projector-test",
        keys::LIVE,
        Duration::from_secs(5),
        &CancellationToken::new(),
    )
    .await
    .unwrap()
    .expect("the live lock");
    lock.take_epoch("projector-test").await.unwrap();
    lock
}

fn settings() -> Settings {
    Settings {
        batch: 2,
        keep: Duration::from_secs(3_600),
        grace: Duration::ZERO,
        ..Settings::default()
    }
}

/// The visible trades, written out from `planted` by hand: (5, 1) is retracted.
fn expected() -> Vec<(u64, u32)> {
    vec![(5, 0), (9_999, 3), (10_005, 0), (10_005, 2)]
}

fn keys_of(rows: &[TradeRow]) -> Vec<(u64, u32)> {
    rows.iter().map(|r| (r.block_number, r.log_index)).collect()
}

async fn project_all(p: &Projector) {
    while p.step().await.unwrap() {}
    let at = p.standing().await.unwrap();
    assert_eq!(at.projected, at.head, "projected every row");
}

#[tokio::test]
async fn the_ledger_reaches_clickhouse_in_batches_behind_a_fenced_cursor() {
    let db = ledger_db().await;
    // Without the live lock the cursor does not move.
    let outsider = Projector::new(db.pg.clone(), db.ch.clone(), 1, settings());
    assert!(
        outsider.step().await.is_err(),
        "fenced off without the lock"
    );
    assert_eq!(outsider.standing().await.unwrap().projected, 0);

    let lock = live_lock(&db).await;
    let p = Projector::new(db.pg.clone(), db.ch.clone(), lock.epoch(), settings());
    assert!(p.step().await.unwrap(), "a full batch of 2: more waits");
    assert_eq!(p.standing().await.unwrap().projected, 2);
    project_all(&p).await;
    let ch = trades::trades_after(&db.ch, Cursor::ORIGIN, u64::MAX / 2, 100)
        .await
        .unwrap();
    assert_eq!(keys_of(&ch), expected());
    // A re-insert (a crash before the cursor moved) changes nothing.
    let c = db.connect().await;
    c.execute("UPDATE stored_cursor SET seq = 0", &[])
        .await
        .unwrap();
    project_all(&p).await;
    let again = trades::trades_after(&db.ch, Cursor::ORIGIN, u64::MAX / 2, 100)
        .await
        .unwrap();
    assert_eq!(again, ch);
}

#[tokio::test]
async fn the_floor_rises_only_past_projected_finalized_old_partitions_and_they_are_dropped() {
    let db = ledger_db().await;
    let lock = live_lock(&db).await;
    let p = Projector::new(db.pg.clone(), db.ch.clone(), lock.epoch(), settings());
    let c = db.connect().await;
    let wallets = vec![fill(0, 0, 1).maker, fill(0, 0, 2).maker];
    let top = Cursor {
        block: 20_000,
        log_index: MAX_LOG_INDEX,
    };
    let before = ledger::wallet_trades_between(&c, &db.ch, &wallets, Cursor::ORIGIN, top, 100)
        .await
        .unwrap();
    assert_eq!(keys_of(&before), expected());

    // Nothing projected yet: the floor stays.
    assert_eq!(p.retain().await.unwrap(), Retained::default());
    project_all(&p).await;
    // Not finalized past the partition: the floor stays.
    c.execute("UPDATE finalized_cursor SET block_number = 9998", &[])
        .await
        .unwrap();
    assert_eq!(p.retain().await.unwrap(), Retained::default());
    c.execute("UPDATE finalized_cursor SET block_number = 10005", &[])
        .await
        .unwrap();
    // Projected, finalized, older than the window: the floor rises past partition 0.
    assert_eq!(
        p.retain().await.unwrap(),
        Retained {
            dropped: vec![],
            floor: Some(10_000)
        }
    );
    // The next pass (grace 0) drops it whole; the next partition is not old enough to leave.
    c.execute(
        "UPDATE chain_blocks SET block_time_ms = $1 WHERE block_number > 10000",
        &[&pmw_core::UnixMs::now().0],
    )
    .await
    .unwrap();
    assert_eq!(
        p.retain().await.unwrap(),
        Retained {
            dropped: vec![0],
            floor: None
        }
    );
    let parts: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'ledger'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(parts, 1);

    // The one ledger reads the same across the seam (ClickHouse below 10_000, Postgres above),
    // for every starting cursor.
    let after = ledger::wallet_trades_between(&c, &db.ch, &wallets, Cursor::ORIGIN, top, 100)
        .await
        .unwrap();
    assert_eq!(after, before);
    for (i, start) in before.iter().enumerate() {
        let page = ledger::trades_after(&c, &db.ch, start.cursor(), 20_000, 100)
            .await
            .unwrap();
        assert_eq!(keys_of(&page), expected()[i + 1..].to_vec(), "after {i}");
    }
    let page = ledger::trades_after(&c, &db.ch, Cursor::ORIGIN, 20_000, 2)
        .await
        .unwrap();
    assert_eq!(
        keys_of(&page),
        expected()[..2].to_vec(),
        "a page cut by the limit"
    );

    // ClickHouse down: above the floor the reads are the same; below it they fail, never
    // answer short.
    let mut cfg = db.cfg.clone();
    cfg.clickhouse_url = "http://127.0.0.1:9".into();
    let dead = pmw_core::ch::client(&cfg);
    let from = Cursor {
        block: 9_999,
        log_index: MAX_LOG_INDEX,
    };
    let above = ledger::wallet_trades_between(&c, &dead, &wallets, from, top, 100)
        .await
        .unwrap();
    assert_eq!(keys_of(&above), expected()[2..].to_vec());
    assert!(
        ledger::wallet_trades_between(&c, &dead, &wallets, Cursor::ORIGIN, top, 100)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn rows_a_writer_never_committed_above_the_watermark_are_retracted_in_clickhouse() {
    let db = ledger_db().await;
    // A writer from before the hot ledger inserted block 10_006 into ClickHouse and died before
    // its commit (the watermark is 10_005).
    let mut stray = fill(10_006, 0, 1);
    stray.block_hash = format!("0x{}", "ee".repeat(32));
    trades::insert_trades(&db.ch, std::slice::from_ref(&stray))
        .await
        .unwrap();
    let lock = live_lock(&db).await;
    let p = Projector::new(db.pg.clone(), db.ch.clone(), lock.epoch(), settings());
    p.sweep().await.unwrap();
    project_all(&p).await;
    let ch = trades::trades_after(&db.ch, Cursor::ORIGIN, u64::MAX / 2, 100)
        .await
        .unwrap();
    assert_eq!(keys_of(&ch), expected(), "the stray row is retracted");
}
