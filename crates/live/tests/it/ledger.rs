//! The hot ledger on a real anvil and real Postgres: every fill is in the ledger when the
//! watermark reaches its block (same statement), a reorg appends retractions (no row is deleted
//! or updated), and seqs follow commit order with no gap.

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
