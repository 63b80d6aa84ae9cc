//! The hot ledger's reorg visibility rule, tested once through the real Postgres: the views of
//! migration 0017 (`ledger_latest`, `ledger_visible`) over a planted reorg, a planted hash
//! conflict, a retraction and an audit's newer version, and every reader of the ledger (core's
//! reads and push's round statement of each lane) returning exactly what the view holds.

use pmw_core::ch::TradeRow;
use pmw_core::pg::ledger;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{Cursor, Position};
use pmw_push::ledger::{LaneCursor, Ledger, Source};
use pmw_testkit::rows::{plant, trade};
use pmw_testkit::TestDb;

fn hash(block: u64, branch: u8) -> String {
    format!("0x{:02x}{:062x}", branch, block)
}

/// A row's identity and version: what the rule decides on.
type Key = (u64, u32, String, u64);

fn keys(rows: &[TradeRow]) -> Vec<Key> {
    rows.iter()
        .map(|r| (r.block_number, r.log_index, r.block_hash.clone(), r.version))
        .collect()
}

fn key(block: u64, log_index: u32, branch: u8, version: u64) -> Key {
    (block, log_index, hash(block, branch), version)
}

fn version(mut r: TradeRow, version: u64, retracted: u8) -> TradeRow {
    (r.version, r.retracted) = (version, retracted);
    r
}

/// Blocks 20..=23, committed on branch 1 except 22 (reorged to branch 2); both watermarks at 23.
async fn planted() -> TestDb {
    let db = TestDb::new().await;
    let c = db.connect().await;
    for b in 20..=23u64 {
        let branch = if b == 22 { 2 } else { 1 };
        c.execute(
            "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
             VALUES ($1, $2, $3, 0, 0, false, 1)",
            &[&(b as i64), &hash(b, branch), &hash(b - 1, 1)],
        )
        .await
        .unwrap();
    }
    for table in ["ingest_cursor", "finalized_cursor"] {
        c.execute(
            &format!("INSERT INTO {table} (id, block_number, block_hash, updated_ms) VALUES (1, 23, $1, 0)"),
            &[&hash(23, 1)],
        )
        .await
        .unwrap();
    }
    let t = |block, log_index, branch| trade(block, log_index, &hash(block, branch));
    plant(
        &c,
        &[
            // Visible as planted.
            t(20, 0, 1),
            // Retracted: its newest version is a retraction.
            t(20, 1, 1),
            version(t(20, 1, 1), 2, 1),
            // An audit's newer version of the same identity: read once, the newer one.
            t(21, 0, 1),
            version(t(21, 0, 1), 3, 0),
            // The reorg of block 22: the old branch's trade retracted, the new branch's read.
            t(22, 0, 1),
            version(t(22, 0, 1), 2, 1),
            version(t(22, 3, 2), 3, 0),
            // A hash conflict: a row of block 23 on a hash never committed, no retraction.
            t(23, 1, 9),
            t(23, 2, 1),
        ],
    )
    .await;
    db
}

fn visible() -> Vec<Key> {
    vec![
        key(20, 0, 1, 1),
        key(21, 0, 1, 3),
        key(22, 3, 2, 3),
        key(23, 2, 1, 1),
    ]
}

#[tokio::test]
async fn every_ledger_reader_sees_exactly_the_rows_of_the_visibility_views() {
    let db = planted().await;
    let c = db.connect().await;

    // The rule itself: the views.
    let view = |sql: &'static str| {
        let c = &c;
        async move {
            c.query(sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| {
                    let b: i64 = r.get(0);
                    let l: i32 = r.get(1);
                    let v: i64 = r.get(3);
                    (b as u64, l as u32, r.get::<_, String>(2), v as u64)
                })
                .collect::<Vec<Key>>()
        }
    };
    assert_eq!(
        view("SELECT block_number, log_index, block_hash, version FROM ledger_visible ORDER BY 1, 2, 3").await,
        visible()
    );
    let latest = vec![
        key(20, 0, 1, 1),
        key(20, 1, 1, 2),
        key(21, 0, 1, 3),
        key(22, 0, 1, 2),
        key(22, 3, 2, 3),
        key(23, 1, 9, 1),
        key(23, 2, 1, 1),
    ];
    assert_eq!(
        view("SELECT block_number, log_index, block_hash, version FROM ledger_latest ORDER BY 1, 2, 3").await,
        latest
    );

    // Core's reads of the hot ledger.
    let before = Cursor {
        block: 19,
        log_index: MAX_LOG_INDEX,
    };
    let through = Cursor {
        block: 23,
        log_index: MAX_LOG_INDEX,
    };
    let rows = ledger::visible_after(&c, before, 23, 100).await.unwrap();
    assert_eq!(keys(&rows), visible());
    let wallet = vec![rows[0].maker.clone()];
    let rows = ledger::wallet_between(&c, &wallet, before, through, 100)
        .await
        .unwrap();
    assert_eq!(keys(&rows), visible());
    assert_eq!(ledger::waiting(&c, before, 23).await.unwrap(), 4);
    let rows = ledger::latest_between(&c, 20, 23).await.unwrap();
    assert_eq!(keys(&rows), latest);
    let rows = ledger::retracted_between(&c, 19, 23).await.unwrap();
    assert_eq!(keys(&rows), vec![key(20, 1, 1, 2), key(22, 0, 1, 2)]);

    // Push's round statement, each lane's: the trades, and a rewind's retractions.
    let client = db.pg.get().await.unwrap();
    for source in [Source::Ws, Source::Webhooks, Source::Finals] {
        let l = Ledger::new(db.pg.clone(), db.ch.clone(), source, 100, 1_000);
        let lane = LaneCursor::new(Position::maybe(before, None), 0);
        let state = l.state(&client, &lane, None).await.unwrap();
        assert_eq!(state.watermark, Some(23), "{source:?}");
        assert_eq!(keys(&state.trades), visible(), "{source:?}");
        assert!(state.retracts.is_empty(), "{source:?}: no rewind");
    }
    c.execute(
        "INSERT INTO reorgs (ancestor, old_head, new_head_hash, depth, detected_ms) VALUES (21, 23, $1, 2, 0)",
        &[&hash(23, 1)],
    )
    .await
    .unwrap();
    let l = Ledger::new(db.pg.clone(), db.ch.clone(), Source::Ws, 100, 1_000);
    let at = Cursor {
        block: 23,
        log_index: 2,
    };
    let lane = LaneCursor::new(Position::maybe(at, None), 0);
    let state = l.state(&client, &lane, None).await.unwrap();
    assert_eq!(keys(&state.retracts), vec![key(22, 0, 1, 2)]);
    assert_eq!(keys(&state.trades), visible()[2..].to_vec());
}
