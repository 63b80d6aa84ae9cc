//! The hot ledger on a real anvil and real Postgres: every fill is in the ledger when the
//! watermark reaches its block (same statement), a reorg appends retractions (no row is deleted
//! or updated), and seqs follow commit order with no gap; the ledger's columns are one list in the
//! table, its views, its inserts and the row type.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{assert_exactly_emitted, Harness};
use pmw_core::pg::ledger;
use pmw_core::Cursor;
use tokio_util::sync::CancellationToken;

const CATCH_UP: Duration = Duration::from_secs(60);

/// (rows, distinct seqs, max seq, ledger_head's seq).
async fn seqs(c: &tokio_postgres::Client) -> (i64, i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT count(*), count(DISTINCT seq), coalesce(max(seq), 0), (SELECT seq FROM ledger_head) FROM ledger",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fill_is_in_the_ledger_when_the_watermark_reaches_its_block() {
    let h = Harness::new().await;
    let live = h.start_live(h.core(), h.live_config().await);
    // At every watermark observed, the ledger holds every emitted fill of the blocks up to it
    // (one snapshot: the watermark and the rows in one transaction).
    let stop = CancellationToken::new();
    let checker = {
        let (mut pg, stop) = (h.db.connect().await, stop.clone());
        tokio::spawn(async move {
            let mut snapshots = Vec::new();
            while !stop.is_cancelled() {
                let tx = pg
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .start()
                    .await
                    .unwrap();
                if let Some(wm) = pmw_core::pg::watermark(&tx).await.unwrap() {
                    let rows = ledger::visible_after(&tx, Cursor::ORIGIN, wm, 1_000_000)
                        .await
                        .unwrap();
                    let keys: BTreeSet<(u64, u32)> =
                        rows.iter().map(|r| (r.block_number, r.log_index)).collect();
                    snapshots.push((wm, keys));
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            snapshots
        })
    };
    h.sim.run_matches(20).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    stop.cancel();
    let snapshots = checker.await.unwrap();
    let canonical = h.sim.canonical();
    assert!(
        !snapshots.is_empty(),
        "the watermark was observed while trading"
    );
    for (wm, keys) in &snapshots {
        let owed: BTreeSet<(u64, u32)> = canonical
            .iter()
            .filter(|e| e.block_number <= *wm)
            .map(|e| (e.block_number, e.log_index as u32))
            .collect();
        assert_eq!(&owed, keys, "ledger at watermark {wm}");
    }
    let c = h.db.connect().await;
    let wm = pmw_core::pg::watermark(&c).await.unwrap().unwrap();
    let visible = ledger::visible_after(&c, Cursor::ORIGIN, wm, 1_000_000)
        .await
        .unwrap();
    assert_exactly_emitted(&visible, &canonical);
    let (rows, distinct, max, head) = seqs(&c).await;
    assert_eq!(rows as usize, canonical.len(), "one row per fill");
    assert_eq!(
        (distinct, max, head),
        (rows, rows, rows),
        "seqs 1..=n, no gap"
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_appends_retractions_and_deletes_nothing() {
    let h = Harness::new().await;
    let live = h.start_live(h.core(), h.live_config().await);
    h.sim.run_matches(6).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    let c = h.db.connect().await;
    let (before, ..) = seqs(&c).await;

    let outcome = h.sim.reorg(2).await.unwrap();
    assert!(
        !outcome.orphaned.is_empty(),
        "the reorg orphaned some fills"
    );
    h.sim.run_matches(1).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;

    let wm = pmw_core::pg::watermark(&c).await.unwrap().unwrap();
    let visible = ledger::visible_after(&c, Cursor::ORIGIN, wm, 1_000_000)
        .await
        .unwrap();
    assert_exactly_emitted(&visible, &h.sim.canonical());
    for o in &outcome.orphaned {
        let versions: Vec<(i16, i64)> = c
            .query(
                "SELECT retracted, version FROM ledger WHERE block_number = $1 AND log_index = $2 AND block_hash = $3 ORDER BY version",
                &[&(o.block_number as i64), &(o.log_index as i32), &o.block_hash.to_string()],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            versions.len(),
            2,
            "the fill and its retraction: {versions:?}"
        );
        assert_eq!((versions[0].0, versions[1].0), (0, 1), "{versions:?}");
    }
    let (after, distinct, max, head) = seqs(&c).await;
    assert!(after > before, "rows appended");
    assert_eq!(
        after as usize,
        h.sim.canonical().len() + 2 * outcome.orphaned.len(),
        "canonical fills once, orphaned fills twice (the fill, its retraction): none deleted"
    );
    assert_eq!(
        (distinct, max, head),
        (after, after, after),
        "seqs 1..=n, no gap"
    );
    live.stop().await.unwrap();
}

/// The columns of `relation` in table order, with their types.
async fn columns_of(c: &tokio_postgres::Client, relation: &str) -> Vec<(String, String)> {
    c.query(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        &[&relation],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// The comma-separated list after `start` up to the next `)`, trimmed.
fn list_after(sql: &str, start: &str) -> Vec<String> {
    let from = sql
        .find(start)
        .unwrap_or_else(|| panic!("{start} in {sql}"))
        + start.len();
    let to = from + sql[from..].find(')').unwrap();
    sql[from..to]
        .split(',')
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test]
async fn the_ledgers_columns_are_one_list_in_the_table_the_views_the_inserts_and_the_row_type() {
    use clickhouse::Row;
    use pmw_core::ch::TradeRow;
    let db = pmw_testkit::TestDb::new().await;
    let c = db.connect().await;
    let table = columns_of(&c, "ledger").await;
    let names: Vec<String> = table.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(columns_of(&c, "ledger_latest").await, table);
    assert_eq!(columns_of(&c, "ledger_visible").await, table);

    // The row type: the table's columns but the three the inserts set (seq, committed_ms,
    // pending_id: the block commit's pairing with a pending fill).
    let written = ["seq", "committed_ms", "pending_id"];
    let fields: BTreeSet<&str> = TradeRow::COLUMN_NAMES.iter().copied().collect();
    let stored: BTreeSet<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !written.contains(n))
        .collect();
    assert_eq!(fields, stored);
    assert_eq!(fields.len(), TradeRow::COLUMN_NAMES.len());

    // Every insert names the table's columns in its order; the JSON record is the row type's
    // fields with the table's types.
    let insert = ledger::insert_sql("$1", "$3");
    let unwind = include_str!("../../src/sql/unwind_ledger.sql");
    for sql in [insert.as_str(), unwind] {
        assert_eq!(list_after(sql, "INSERT INTO ledger ("), names, "{sql}");
    }
    let record: BTreeSet<String> = list_after(&insert, "jsonb_to_recordset($1::jsonb) AS (")
        .into_iter()
        .collect();
    let typed: BTreeSet<String> = table
        .iter()
        .filter(|(n, _)| !written.contains(&n.as_str()))
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    assert_eq!(record, typed);

    // A row read back is the row written: the reads map TradeRow::COLUMNS by position.
    let mut row = pmw_testkit::rows::trade(7, 3, &format!("0x{}", "ab".repeat(32)));
    (row.side, row.backfilled, row.audit, row.version) = (1, 1, 1, 9);
    (row.block_time_ms, row.t_detect_ms, row.exchange_version) = (11, 12, 2);
    (row.fee, row.fee_asset) = ("0.01".into(), "shares".into());
    pmw_testkit::rows::plant(&c, std::slice::from_ref(&row)).await;
    let before = Cursor {
        block: 6,
        log_index: 0,
    };
    let read = ledger::visible_after(&c, before, 7, 10).await.unwrap();
    assert_eq!(read, vec![row.clone()]);
    let latest = ledger::latest_between(&c, 7, 7).await.unwrap();
    assert_eq!(latest, vec![row]);
}
