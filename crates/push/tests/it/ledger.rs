//! The ledger read on its own, against the real stores and without a hub: what a lane's round
//! reads after its cursor (bounded by the watermark, a cursor bound and the batch limit), and what
//! a reorg below it makes it retract and rewind to. The rows are planted in the Postgres hot
//! ledger; ClickHouse is read only below the hot ledger's floor.

use pmw_core::ch::{trades, TradeRow};
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{Cursor, Position};
use pmw_push::ledger::{LaneCursor, Ledger, Source};
use pmw_push::matcher::Matcher;
use pmw_session::subs::Subscriptions;
use pmw_testkit::rows::plant;
use pmw_testkit::TestDb;

fn hash(block: u64, branch: u8) -> String {
    format!("0x{:02x}{:062x}", branch, block)
}

fn row(block: u64, log_index: u32, branch: u8) -> TradeRow {
    pmw_testkit::rows::trade(block, log_index, &hash(block, branch))
}

/// Blocks 10..=13 on branch 1, trades in 11 (two) and 12 (one), the watermark at 13.
async fn ledger_of_three() -> TestDb {
    let db = TestDb::new().await;
    let c = db.connect().await;
    for b in 10..=13u64 {
        let n = match b {
            11 => 2,
            12 => 1,
            _ => 0,
        };
        c.execute(
            "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
             VALUES ($1, $2, $3, 0, 0, false, $4)",
            &[&(b as i64), &hash(b, 1), &hash(b - 1, 1), &n],
        )
        .await
        .unwrap();
    }
    c.execute(
        "INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 13, $1, 0)",
        &[&hash(13, 1)],
    )
    .await
    .unwrap();
    plant(&c, &[row(11, 0, 1), row(11, 4, 1), row(12, 2, 1)]).await;
    db
}

fn at(block: u64, log_index: u32) -> LaneCursor {
    LaneCursor::new(Position::maybe(Cursor { block, log_index }, None), 0)
}

fn ledger(db: &TestDb, limit: u64) -> (Ledger, Matcher) {
    let l = Ledger::new(db.pg.clone(), db.ch.clone(), Source::Ws, limit, 1_000);
    (l, Matcher::new(Subscriptions::default(), false))
}

fn cursors(rows: &[TradeRow]) -> Vec<(u64, u32)> {
    rows.iter().map(|r| (r.block_number, r.log_index)).collect()
}

#[tokio::test]
async fn a_read_returns_the_trades_after_the_cursor_up_to_the_watermark_in_ledger_order() {
    let db = ledger_of_three().await;
    let (mut l, mut m) = ledger(&db, 100);
    let r = l.read(&at(10, MAX_LOG_INDEX), &mut m, None).await.unwrap();
    assert_eq!(r.watermark, Some(13));
    assert!(r.reloaded, "the first read loads the subscription index");
    let b = r.batch.expect("three trades to deliver");
    assert_eq!(cursors(&b.rows), vec![(11, 0), (11, 4), (12, 2)]);
    assert_eq!(
        b.through.cursor,
        Cursor {
            block: 12,
            log_index: 2
        }
    );
    assert!(b.retracts.is_empty() && !b.rewound && !b.more);

    // From the last trade on: nothing to deliver, and the index is not reloaded again.
    let mut lane = at(10, MAX_LOG_INDEX);
    lane.moved(&b);
    let r = l.read(&lane, &mut m, None).await.unwrap();
    assert!(r.batch.is_none(), "nothing after the last trade");
    assert!(!r.reloaded);
}

#[tokio::test]
async fn a_read_stops_at_its_bound_and_at_the_batch_limit() {
    let db = ledger_of_three().await;
    let (mut l, mut m) = ledger(&db, 100);
    let bound = Cursor {
        block: 11,
        log_index: 4,
    };
    let b = l
        .read(&at(10, MAX_LOG_INDEX), &mut m, Some(bound))
        .await
        .unwrap()
        .batch
        .unwrap();
    assert_eq!(cursors(&b.rows), vec![(11, 0), (11, 4)]);
    assert_eq!(b.through.cursor, bound);

    let (mut l, mut m) = ledger(&db, 2);
    let b = l
        .read(&at(10, MAX_LOG_INDEX), &mut m, None)
        .await
        .unwrap()
        .batch
        .unwrap();
    assert_eq!(cursors(&b.rows), vec![(11, 0), (11, 4)]);
    assert!(b.more, "a full batch says more is waiting");
}

/// The finality lane before any block is final: its round's statement reads no row (it read and
/// serialised every row up to the other lanes' bound each round, which the lane then dropped: a
/// cost that grew with every block until the first finalized watermark).
#[tokio::test]
async fn a_lane_without_its_watermark_reads_no_row_whatever_its_bound() {
    let db = ledger_of_three().await;
    let l = Ledger::new(db.pg.clone(), db.ch.clone(), Source::Finals, 100, 1_000);
    let client = db.pg.get().await.unwrap();
    let bound = Cursor {
        block: 13,
        log_index: MAX_LOG_INDEX,
    };
    let state = l
        .state(&client, &at(10, MAX_LOG_INDEX), Some(bound))
        .await
        .unwrap();
    assert_eq!(state.watermark, None, "no finalized block yet");
    assert_eq!(cursors(&state.trades), Vec::<(u64, u32)>::new());
    // Once a block is final, the same statement reads up to it (and the bound).
    db.connect()
        .await
        .execute(
            "INSERT INTO finalized_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 11, $1, 0)",
            &[&hash(11, 1)],
        )
        .await
        .unwrap();
    let state = l
        .state(&client, &at(10, MAX_LOG_INDEX), Some(bound))
        .await
        .unwrap();
    assert_eq!(state.watermark, Some(11));
    assert_eq!(cursors(&state.trades), vec![(11, 0), (11, 4)]);
}

#[tokio::test]
async fn a_reorg_below_the_cursor_retracts_what_the_lane_delivered_and_rewinds_to_the_ancestor() {
    let db = ledger_of_three().await;
    // Block 12 is orphaned: its trade retracted, the new branch's 12 has another trade.
    let c = db.connect().await;
    let mut gone = row(12, 2, 1);
    (gone.retracted, gone.version) = (1, 2);
    plant(&c, &[gone, row(12, 7, 2)]).await;
    c.execute(
        "UPDATE chain_blocks SET block_hash = $1, trade_count = 1 WHERE block_number = 12",
        &[&hash(12, 2)],
    )
    .await
    .unwrap();
    let reorg: i64 = c
        .query_one(
            "INSERT INTO reorgs (ancestor, old_head, new_head_hash, depth, detected_ms) \
             VALUES (11, 13, $1, 2, 0) RETURNING id",
            &[&hash(13, 2)],
        )
        .await
        .unwrap()
        .get(0);

    let (mut l, mut m) = ledger(&db, 100);
    let lane = at(12, 2);
    let b = l.read(&lane, &mut m, None).await.unwrap().batch.unwrap();
    assert!(b.rewound);
    assert_eq!(
        b.from.cursor,
        Cursor {
            block: 11,
            log_index: MAX_LOG_INDEX
        }
    );
    let ancestor = hash(11, 1);
    assert_eq!(
        b.from,
        Position::maybe(b.from.cursor, Some(ancestor.as_str()))
    );
    assert_eq!(cursors(&b.retracts), vec![(12, 2)]);
    assert_eq!(b.retracts[0].block_hash, hash(12, 1));
    assert_eq!(cursors(&b.rows), vec![(12, 7)]);
    assert_eq!(b.rows[0].block_hash, hash(12, 2));
    assert_eq!(b.reorg_id, reorg);
}

#[tokio::test]
async fn only_rows_of_the_committed_block_hash_are_read() {
    let db = ledger_of_three().await;
    // A row at a position of block 11 on a hash that was never committed, with no retraction
    // (ClickHouse rows of a writer that died; an orphan whose retraction is missing).
    let c = db.connect().await;
    plant(&c, &[row(11, 0, 9), row(11, 2, 9)]).await;
    let (mut l, mut m) = ledger(&db, 100);
    let b = l
        .read(&at(10, MAX_LOG_INDEX), &mut m, None)
        .await
        .unwrap()
        .batch
        .unwrap();
    assert_eq!(cursors(&b.rows), vec![(11, 0), (11, 4), (12, 2)]);
    assert!(b
        .rows
        .iter()
        .all(|r| r.block_hash == hash(r.block_number, 1)));
}

#[tokio::test]
async fn a_lane_below_the_hot_ledgers_floor_reads_clickhouse_there_and_the_ledger_above() {
    let db = ledger_of_three().await;
    // Blocks below 11 are history: in ClickHouse only (the floor rose past them).
    let c = db.connect().await;
    c.execute(
        "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
         VALUES (9, $1, $2, 0, 0, false, 1)",
        &[&hash(9, 1), &hash(8, 1)],
    )
    .await
    .unwrap();
    trades::insert_trades(&db.ch, &[row(9, 3, 1)])
        .await
        .unwrap();
    c.execute("UPDATE stored_cursor SET floor_block = 11", &[])
        .await
        .unwrap();
    let (mut l, mut m) = ledger(&db, 100);
    let b = l
        .read(&at(8, MAX_LOG_INDEX), &mut m, None)
        .await
        .unwrap()
        .batch
        .unwrap();
    assert_eq!(cursors(&b.rows), vec![(9, 3), (11, 0), (11, 4), (12, 2)]);
}

#[tokio::test]
async fn a_deep_audit_rewind_reads_the_correction_and_none_of_the_trades_the_lane_delivered() {
    let db = ledger_of_three().await;
    // A trade far above (more than any session remembers: 256 blocks), the watermark with it.
    let c = db.connect().await;
    plant(&c, &[row(400, 1, 1)]).await;
    c.execute(
        "UPDATE ingest_cursor SET block_number = 400, block_hash = $1",
        &[&hash(400, 1)],
    )
    .await
    .unwrap();
    let (mut l, mut m) = ledger(&db, 100);
    let mut lane = at(10, MAX_LOG_INDEX);
    let b = l.read(&lane, &mut m, None).await.unwrap().batch.unwrap();
    assert_eq!(cursors(&b.rows), vec![(11, 0), (11, 4), (12, 2), (400, 1)]);
    lane.moved(&b);

    // The audit backfills a fill of block 11 and records its rewind to block 10.
    let mut missed = row(11, 2, 1);
    (missed.audit, missed.backfilled, missed.version) = (1, 1, 5);
    plant(&c, std::slice::from_ref(&missed)).await;
    let reorg: i64 = c
        .query_one(
            "INSERT INTO reorgs (ancestor, old_head, new_head_hash, depth, detected_ms, cause) \
             VALUES (10, 400, $1, 390, 0, 'audit') RETURNING id",
            &[&hash(11, 1)],
        )
        .await
        .unwrap()
        .get(0);
    let b = l.read(&lane, &mut m, None).await.unwrap().batch.unwrap();
    assert!(b.rewound);
    assert_eq!(b.reorg_id, reorg);
    assert_eq!(
        cursors(&b.rows),
        vec![(11, 2)],
        "only the backfilled fill: the lane delivered the others"
    );
    assert_eq!(
        b.through.cursor,
        Cursor {
            block: 400,
            log_index: 1
        },
        "the lane is back at its highest cursor"
    );
    lane.moved(&b);
    assert!(l.read(&lane, &mut m, None).await.unwrap().batch.is_none());

    // A lane that does not know what it delivered (started from a stored cursor) reads them all.
    let (mut l, mut m) = ledger(&db, 100);
    let fresh = LaneCursor::new(lane.position, 0);
    let b = l.read(&fresh, &mut m, None).await.unwrap().batch.unwrap();
    assert_eq!(
        cursors(&b.rows),
        vec![(11, 0), (11, 2), (11, 4), (12, 2), (400, 1)]
    );
}
