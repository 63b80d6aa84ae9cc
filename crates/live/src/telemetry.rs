//! pmw-live's Prometheus metrics (served on `PMW_LIVE_METRICS_ADDR`, see [`crate::config`]).
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `pmw_live_blocks_seen_total` | counter | block headers seen live (WebSocket or poll) |
//! | `pmw_live_blocks_ingested_total` | counter | blocks stored and the watermark moved to them |
//! | `pmw_live_blocks_backfilled_total` | counter | of those, fetched by number (not seen live) |
//! | `pmw_live_reorgs_total` | counter | reorgs unwound |
//! | `pmw_live_trades_total` | counter | trades stored |
//! | `pmw_live_clickhouse_insert_errors_total{table}` | counter | failed ClickHouse inserts |
//! | `pmw_live_ingest_errors_total` | counter | ingest steps that failed and were retried |
//! | `pmw_live_ingest_stage_seconds{stage}` | histogram | `logs` (detect → logs fetched), `stored` (logs → watermark committed), `total` (detect → committed) |
//! | `pmw_live_watermark_block` | gauge | the ingest watermark |
//! | `pmw_live_head_block` | gauge | the newest head seen |
//! | `pmw_live_finalized_block` | gauge | the finalized watermark (highest ingested block the chain calls finalized) |
//! | `pmw_live_chain_finalized_block` | gauge | the chain's own `finalized` block |
//! | `pmw_live_finality_violations_total` | counter | reorgs that would retract below the finalized watermark (refused: an alarm) |
//! | `pmw_live_audit_blocks_total` | counter | finalized blocks the completeness audit compared with the chain |
//! | `pmw_live_audit_fills_checked_total` | counter | fills it compared (the chain's, plus stored ones the chain does not have) |
//! | `pmw_live_audit_missing_total` | counter | fills on the chain missing from the store: backfilled (flagged `audit`) |
//! | `pmw_live_audit_extra_total` | counter | stored fills not on the chain: retracted |
//! | `pmw_live_audit_errors_total` | counter | audit steps that failed and were retried |
//! | `pmw_live_audit_disagreements_total` | counter | of those, a finalized block whose chain hash is not the recorded one (an alarm: nothing corrected) |
//! | `pmw_live_audit_block` | gauge | the audited watermark (every block up to it compared) |
//! | `pmw_live_audit_trail_blocks` | gauge | ingest watermark − audited watermark, at the last audited range |
//! | `pmw_live_unlisted_emitter_events_total{address,source}` | counter | fill/match events from contracts outside the exchange list (`source` = `ingest` or `audit`; the first 16 addresses by name, later ones as `other`): never delivered ([`crate::emitters`]) |
//! | `pmw_live_head_lead_ms` | gauge | detect time − block timestamp of the last block seen live (clock offset plus propagation) |
//!
//! The pending tier ([`crate::mempool`], [`crate::pending`]):
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `pmw_live_pending_settlements_total{provider}` | counter | settlement transactions first seen pending (by the provider that saw each first) |
//! | `pmw_live_pending_fills_total` | counter | fills their calldata names |
//! | `pmw_live_pending_other_calls_total` | counter | other calls to a settlement contract (admin, cancels): not announced |
//! | `pmw_live_pending_undecodable_total{reason}` | counter | settlement calls whose calldata does not decode (`short`, `abi`, `inconsistent`; a sample logged each minute) |
//! | `pmw_live_pending_skipped_total{reason}` | counter | announcements not followed (`saturated` body fetches, `malformed`) |
//! | `pmw_live_pending_queue_full_total` | counter | sightings dropped because the recorder's queue was full |
//! | `pmw_live_pending_recorded_total` | counter | pending fills recorded (`pending` events) |
//! | `pmw_live_pending_mined_before_seen_total` | counter | first sightings of a settlement the ledger already held: not recorded |
//! | `pmw_live_pending_confirmed_total` | counter | pending fills paired with their trade in a block commit |
//! | `pmw_live_pending_amount_mismatch_total` | counter | of those, fills whose calldata `taking` differs from the log's |
//! | `pmw_live_pending_voided_total{reason}` | counter | pending fills ended `reverted`, `replaced`, `dropped` or `expired` |
//! | `pmw_live_pending_open_txs` | gauge | settlements with a fill still open at the last resolution |
//! | `pmw_live_pending_store_errors_total` | counter | recorder or resolution steps that failed (retried with the next sighting or watermark) |
//!
//! Per RPC provider (`pmw_live_provider_*{provider}`: heads announced and won, lag behind the
//! winner, health, leader, errors, "not found" answers, hedges): [`crate::providers`].

use pmw_core::UnixMs;

pub const BLOCKS_SEEN: &str = "pmw_live_blocks_seen_total";
pub const BLOCKS_INGESTED: &str = "pmw_live_blocks_ingested_total";
pub const BLOCKS_BACKFILLED: &str = "pmw_live_blocks_backfilled_total";
pub const REORGS: &str = "pmw_live_reorgs_total";
pub const TRADES: &str = "pmw_live_trades_total";
pub const CH_INSERT_ERRORS: &str = "pmw_live_clickhouse_insert_errors_total";
pub const INGEST_ERRORS: &str = "pmw_live_ingest_errors_total";
pub const STAGE_SECONDS: &str = "pmw_live_ingest_stage_seconds";
pub const WATERMARK: &str = "pmw_live_watermark_block";
pub const HEAD: &str = "pmw_live_head_block";
pub const HEAD_LEAD_MS: &str = "pmw_live_head_lead_ms";
pub const FINALIZED: &str = "pmw_live_finalized_block";
pub const CHAIN_FINALIZED: &str = "pmw_live_chain_finalized_block";
pub const FINALITY_VIOLATIONS: &str = "pmw_live_finality_violations_total";
pub const AUDIT_BLOCKS: &str = "pmw_live_audit_blocks_total";
pub const AUDIT_FILLS: &str = "pmw_live_audit_fills_checked_total";
pub const AUDIT_MISSING: &str = "pmw_live_audit_missing_total";
pub const AUDIT_EXTRA: &str = "pmw_live_audit_extra_total";
pub const AUDIT_ERRORS: &str = "pmw_live_audit_errors_total";
pub const AUDIT_DISAGREEMENTS: &str = "pmw_live_audit_disagreements_total";
pub const AUDIT_BLOCK: &str = "pmw_live_audit_block";
pub const AUDIT_TRAIL: &str = "pmw_live_audit_trail_blocks";

/// Every counter exists from the start (at 0), so `rate()` and `increase()` see a series.
pub fn init() {
    for c in [
        BLOCKS_SEEN,
        BLOCKS_INGESTED,
        BLOCKS_BACKFILLED,
        REORGS,
        TRADES,
        INGEST_ERRORS,
        FINALITY_VIOLATIONS,
        AUDIT_BLOCKS,
        AUDIT_FILLS,
        AUDIT_MISSING,
        AUDIT_EXTRA,
        AUDIT_ERRORS,
        AUDIT_DISAGREEMENTS,
    ] {
        metrics::counter!(c).increment(0);
    }
    for table in ["trades", "ingest_latency"] {
        metrics::counter!(CH_INSERT_ERRORS, "table" => table).increment(0);
    }
}

/// A new head was seen live.
pub fn head_seen(head: u64, lead_ms: i64) {
    metrics::counter!(BLOCKS_SEEN).increment(1);
    metrics::gauge!(HEAD).set(head as f64);
    metrics::gauge!(HEAD_LEAD_MS).set(lead_ms as f64);
}

/// When a block's ingest stages ended.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    pub detect: UnixMs,
    pub logs: UnixMs,
    pub stored: UnixMs,
}

/// A block was ingested: its stage latencies and the watermark.
pub fn block_ingested(number: u64, backfilled: bool, trades: usize, t: Times) {
    let Times {
        detect: t_detect,
        logs: t_logs,
        stored: t_stored,
    } = t;
    metrics::counter!(BLOCKS_INGESTED).increment(1);
    if backfilled {
        metrics::counter!(BLOCKS_BACKFILLED).increment(1);
    }
    metrics::counter!(TRADES).increment(trades as u64);
    metrics::gauge!(WATERMARK).set(number as f64);
    let secs = |a: UnixMs, b: UnixMs| (b.0 - a.0).max(0) as f64 / 1000.0;
    metrics::histogram!(STAGE_SECONDS, "stage" => "logs").record(secs(t_detect, t_logs));
    metrics::histogram!(STAGE_SECONDS, "stage" => "stored").record(secs(t_logs, t_stored));
    metrics::histogram!(STAGE_SECONDS, "stage" => "total").record(secs(t_detect, t_stored));
}

/// A reorg was unwound to `ancestor`.
pub fn reorged(ancestor: u64) {
    metrics::counter!(REORGS).increment(1);
    metrics::gauge!(WATERMARK).set(ancestor as f64);
}

/// A ClickHouse insert into `table` failed.
pub fn ch_insert_failed(table: &'static str) {
    metrics::counter!(CH_INSERT_ERRORS, "table" => table).increment(1);
}

/// The finalized watermark moved to `block` (the chain finalized `chain`).
pub fn finalized(block: u64, chain: u64) {
    metrics::gauge!(FINALIZED).set(block as f64);
    metrics::gauge!(CHAIN_FINALIZED).set(chain as f64);
}

/// What one audited range found, in plain figures.
#[derive(Debug, Clone, Copy)]
pub struct Audited {
    pub from: u64,
    pub to: u64,
    pub fills_checked: u64,
    pub missing: u64,
    pub extra: u64,
    /// The ingest watermark when the range was audited.
    pub head: u64,
}

/// The completeness audit compared a range.
pub fn audited(r: Audited) {
    metrics::counter!(AUDIT_BLOCKS).increment(r.to - r.from + 1);
    metrics::counter!(AUDIT_FILLS).increment(r.fills_checked);
    metrics::counter!(AUDIT_MISSING).increment(r.missing);
    metrics::counter!(AUDIT_EXTRA).increment(r.extra);
    metrics::gauge!(AUDIT_BLOCK).set(r.to as f64);
    metrics::gauge!(AUDIT_TRAIL).set(r.head.saturating_sub(r.to) as f64);
}

/// An audit step failed (`disagreement`: the chain disagrees with a finalized block).
pub fn audit_failed(disagreement: bool) {
    metrics::counter!(AUDIT_ERRORS).increment(1);
    if disagreement {
        metrics::counter!(AUDIT_DISAGREEMENTS).increment(1);
    }
}

/// A block commit paired `paired` trades with pending fills, `mismatched` of them with another
/// taking amount than the calldata's.
pub fn pending_confirmed(paired: u64, mismatched: u64) {
    metrics::counter!(crate::pending::CONFIRMED).increment(paired);
    metrics::counter!(crate::pending::AMOUNT_MISMATCH).increment(mismatched);
}
