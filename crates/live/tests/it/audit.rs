//! The completeness audit on a private anvil whose `finalized` trails the head by 4 blocks:
//! fills ingest never stored (live ran with one exchange left out of its allowlist) are
//! backfilled, flagged and counted; injected rows the chain does not have are retracted; an
//! untouched run reports nothing missing and nothing extra over every fill. The oracle is the
//! simulator's canonical record.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pmw_core::ch::{trades, TradeRow};
use pmw_core::trade::Allowlist;
use pmw_core::{Cursor, UnixMs};
use pmw_live::LiveConfig;
use pmw_testkit::{eventually_every, ServiceHandle};

use crate::common::{assert_exactly_emitted, Harness};

const WITHIN: Duration = Duration::from_secs(60);
pub(crate) const ANVIL_FINALITY: &[&str] = &["--slots-in-an-epoch", "2"];

/// Live settings with fast finality and a fast audit of small ranges.
pub(crate) fn audit_fast(mut live: LiveConfig, audit: bool) -> LiveConfig {
    live.live_finalized_poll_ms = 100;
    live.live_audit_enabled = audit;
    live.live_audit_range_blocks = 5;
    live.live_audit_max_rps = 200.0;
    live.live_audit_interval_ms = 100;
    live
}

fn start(h: &Harness, live: LiveConfig, allow: Allowlist) -> ServiceHandle {
    let core = h.core();
    ServiceHandle::spawn(move |stop| pmw_live::run_with(core, live, allow, stop))
}

async fn audit_cursor(h: &Harness) -> Option<u64> {
    let c = h.db.connect().await;
    c.query_opt("SELECT block_number FROM audit_cursor WHERE id = 1", &[])
        .await
        .unwrap()
        .map(|r| r.get::<_, i64>(0) as u64)
}

/// Mine empty blocks (so `finalized` moves on) until the audit has passed `block`.
pub(crate) async fn wait_audited(h: &Harness, block: u64) -> u64 {
    let polled = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let at = audit_cursor(h).await;
        match at.filter(|a| *a >= block) {
            Some(a) => Ok(a),
            None => {
                h.sim.rpc().mine().await.unwrap();
                Err(at)
            }
        }
    })
    .await;
    polled.unwrap_or_else(|at| {
        panic!("the audit did not reach block {block} within {WITHIN:?} (at {at:?})")
    })
}

/// Sums over `audit_ranges`: (ranges, fills checked, missing, extra, max head − to_block,
/// the highest block audited), in one snapshot.
async fn totals(h: &Harness) -> (i64, i64, i64, i64, i64, u64) {
    let c = h.db.connect().await;
    let r = c
        .query_one(
            "SELECT count(*), coalesce(sum(fills_checked), 0)::bigint, coalesce(sum(missing), 0)::bigint, \
             coalesce(sum(extra), 0)::bigint, coalesce(max(head_block - to_block), 0)::bigint, \
             coalesce(max(to_block), 0)::bigint FROM audit_ranges",
            &[],
        )
        .await
        .unwrap();
    (
        r.get(0),
        r.get(1),
        r.get(2),
        r.get(3),
        r.get(4),
        r.get::<_, i64>(5) as u64,
    )
}

/// Every stored version's newest state of blocks `from..=to`.
async fn latest(h: &Harness, from: u64, to: u64) -> Vec<TradeRow> {
    let c = h.db.connect().await;
    pmw_core::pg::ledger::latest_versions_between(&c, &h.db.ch, from, to)
        .await
        .unwrap()
}

/// (block, count) of `chain_blocks` from `from` up.
async fn recorded_counts(h: &Harness, from: u64, to: u64) -> BTreeMap<u64, i32> {
    let c = h.db.connect().await;
    c.query(
        "SELECT block_number, trade_count FROM chain_blocks WHERE block_number BETWEEN $1 AND $2",
        &[&(from as i64), &(to as i64)],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_backfills_fills_ingest_never_stored_and_retracts_injected_extra_rows() {
    let h = Harness::with_anvil(ANVIL_FINALITY).await;
    let full = Allowlist::polymarket();
    let left_out = full.addresses().next().unwrap();
    let partial = Allowlist::new(full.iter().filter(|(a, _)| *a != left_out)).unwrap();
    let first = h.live_config().await.live_start_block.unwrap();

    // 1. Live without one exchange (and without the audit): its fills are never stored.
    let live = start(&h, audit_fast(h.live_config().await, false), partial);
    for _ in 0..6 {
        h.sim.run_matches(6).await.unwrap();
        let n = h
            .sim
            .canonical()
            .iter()
            .filter(|e| e.exchange.to_lower_hex() == left_out.to_lower_hex())
            .count();
        if n >= 2 {
            break;
        }
    }
    h.wait_caught_up(WITHIN).await;
    live.stop().await.unwrap();
    let (phase1, _) = h.cursor().await.unwrap();
    let canonical = h.sim.canonical();
    let never_stored: BTreeSet<(u64, u32)> = canonical
        .iter()
        .filter(|e| e.exchange.to_lower_hex() == left_out.to_lower_hex())
        .map(|e| (e.block_number, e.log_index as u32))
        .collect();
    assert!(
        never_stored.len() >= 2,
        "premise: the left-out exchange filled"
    );
    let stored = h.visible().await;
    assert!(
        stored
            .iter()
            .all(|r| !never_stored.contains(&(r.block_number, r.log_index))),
        "premise: ingest never stored them"
    );

    // 2. Two rows the chain does not have, in a block holding a real fill: one on the block's
    // canonical hash (a log index the block lacks), one on a hash that is not the block's.
    let real = stored
        .first()
        .expect("premise: some fill was stored")
        .clone();
    let b = real.block_number;
    let mut fake = real.clone();
    fake.log_index = 900;
    fake.order_hash = format!("0x{:064x}", 900);
    let mut orphan = real.clone();
    orphan.log_index = 901;
    orphan.block_hash = format!("0x{}", "ee".repeat(32));
    let mut c = h.db.connect().await;
    let tx = c.transaction().await.unwrap();
    pmw_live::ingest::ledger::append(&tx, &[fake.clone(), orphan.clone()], UnixMs::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    c.execute(
        "UPDATE chain_blocks SET trade_count = trade_count + 2 WHERE block_number = $1",
        &[&(b as i64)],
    )
    .await
    .unwrap();

    // 3. Live again with every exchange and the audit.
    let started = UnixMs::now().0;
    let live = start(&h, audit_fast(h.live_config().await, true), full);
    let audited = wait_audited(&h, phase1).await;
    h.sim.run_matches(3).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    let canonical = h.sim.canonical();

    // Exactly the chain's fills are visible; the backfilled ones are exactly those never stored.
    let visible = h.visible().await;
    assert_exactly_emitted(&visible, &canonical);
    // The hot ledger holds the same: the corrections were appended in the audit's transaction.
    let wm = pmw_core::pg::watermark(&c).await.unwrap().unwrap();
    let hot = pmw_core::pg::ledger::visible_after(&c, Cursor::ORIGIN, wm, 1_000_000)
        .await
        .unwrap();
    assert_exactly_emitted(&hot, &canonical);
    let flagged: BTreeSet<(u64, u32)> = visible
        .iter()
        .filter(|r| r.audit == 1)
        .map(|r| (r.block_number, r.log_index))
        .collect();
    assert_eq!(
        flagged, never_stored,
        "backfilled exactly the missing fills"
    );
    for r in visible.iter().filter(|r| r.audit == 1) {
        assert_eq!(r.backfilled, 1, "an audit fill is a backfilled one: {r:?}");
        assert!(
            r.t_detect_ms >= started,
            "its t_detect_ms is the audit's time, not a live detection: {r:?}"
        );
    }
    // The per-wallet copy in ClickHouse has it too, flagged, once projected.
    h.projected(WITHIN).await;
    let one = visible.iter().find(|r| r.audit == 1).unwrap();
    let through = Cursor {
        block: u64::MAX / 2,
        log_index: 0,
    };
    let theirs = trades::wallet_trades_between(
        &h.db.ch,
        std::slice::from_ref(&one.maker),
        Cursor::ORIGIN,
        through,
        1_000,
    )
    .await
    .unwrap();
    assert!(
        theirs
            .iter()
            .any(|r| r.cursor() == one.cursor() && r.audit == 1),
        "trades_by_wallet holds the backfilled fill"
    );
    // The injected rows are retracted (a newer version), not deleted.
    let rows = latest(&h, b, b).await;
    for f in [&fake, &orphan] {
        let r = rows
            .iter()
            .find(|r| r.log_index == f.log_index && r.block_hash == f.block_hash)
            .unwrap();
        assert_eq!(r.retracted, 1, "{r:?}");
        assert!(r.version > f.version);
    }
    // Every audited block's recorded count is the chain's.
    let mut per_block: BTreeMap<u64, i32> = BTreeMap::new();
    for e in &canonical {
        *per_block.entry(e.block_number).or_default() += 1;
    }
    for (n, count) in recorded_counts(&h, first, audited).await {
        assert_eq!(
            count,
            per_block.get(&n).copied().unwrap_or(0),
            "trade_count of block {n}"
        );
    }
    // Counted, and push is told to rewind below the lowest correction (cause 'audit').
    let (ranges, checked, missing, extra, trail, audited) = totals(&h).await;
    let chain_fills = canonical
        .iter()
        .filter(|e| e.block_number <= audited)
        .count() as i64;
    assert_eq!(missing, never_stored.len() as i64);
    assert_eq!(extra, 2);
    assert_eq!(checked, chain_fills + 2, "every fill compared once");
    let lowest = never_stored.iter().next().unwrap().0.min(b);
    let rewinds = c
        .query_one(
            "SELECT min(ancestor), count(*) FILTER (WHERE cause = 'reorg') FROM reorgs",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rewinds.get::<_, Option<i64>>(0), Some(lowest as i64 - 1));
    assert_eq!(rewinds.get::<_, i64>(1), 0, "no chain reorg recorded");
    println!(
        "audit: {ranges} ranges through block {audited}: {checked} fills checked, {missing} missing, {extra} extra; trailed the head by at most {trail} blocks"
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untouched_run_audits_every_fill_and_finds_nothing_missing_or_extra() {
    let h = Harness::with_anvil(ANVIL_FINALITY).await;
    let live = start(
        &h,
        audit_fast(h.live_config().await, true),
        Allowlist::polymarket(),
    );
    h.sim.run_matches(12).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    let canonical = h.sim.canonical();
    let last = canonical.iter().map(|e| e.block_number).max().unwrap();
    wait_audited(&h, last).await;
    let (ranges, checked, missing, extra, trail, audited) = totals(&h).await;
    assert_eq!((missing, extra), (0, 0), "nothing missing, nothing extra");
    assert_eq!(checked, canonical.len() as i64, "every fill was checked");
    assert!(checked > 0);
    let c = h.db.connect().await;
    let rewinds: i64 = c
        .query_one("SELECT count(*) FROM reorgs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rewinds, 0, "no correction, no rewind");
    assert!(h.visible().await.iter().all(|r| r.audit == 0));
    assert_exactly_emitted(&h.visible().await, &canonical);
    println!(
        "audit (untouched): {ranges} ranges through block {audited}: {checked} fills checked, {missing} missing, {extra} extra; trailed the head by at most {trail} blocks"
    );
    live.stop().await.unwrap();
}
