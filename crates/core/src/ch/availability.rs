//! Availability samples: one `availability_samples` row per second from pmw-stats' sampler (how
//! far push and ingest trail, and whether each was within its published bound), and the window
//! aggregate the dashboard shows. Times are Int64 milliseconds, written through RowBinary.

use serde::{Deserialize, Serialize};

use super::window::Window;
use crate::ch::ChClient;

/// One sample. `*_down_since_ms` is the first sample of the run of failing samples this one
/// belongs to (0 when ok), so a window's longest gap is one aggregate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct AvailabilitySample {
    pub t_ms: i64,
    /// How long the oldest trade push owes has been readable (0: none owed; -1: unknown).
    pub push_lag_ms: i64,
    pub push_ok: u8,
    pub push_down_since_ms: i64,
    /// Newest head pmw-live received − ingest watermark (-1: no fresh pmw-live heartbeat).
    pub ingest_lag_blocks: i64,
    pub ingest_ok: u8,
    pub ingest_down_since_ms: i64,
    pub watermark: u64,
    pub head: u64,
    pub push_block: u64,
}

/// One window's aggregate: seconds sampled, seconds each part was available, each part's
/// longest run of failing samples (ms, 0 when none) with its start, and the most each trailed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, clickhouse::Row)]
pub struct AvailabilityAgg {
    pub sampled: u64,
    pub push_ok_s: u64,
    pub ingest_ok_s: u64,
    pub push_gap_ms: i64,
    pub push_gap_from_ms: i64,
    pub ingest_gap_ms: i64,
    pub ingest_gap_from_ms: i64,
    /// The most the oldest owed trade had waited in any sample (-1: never measurable).
    pub push_max_lag_ms: i64,
    /// The most ingest trailed the head in any sample, in blocks (-1: never measurable).
    pub ingest_max_lag_blocks: i64,
}

/// Insert samples in one INSERT (the production write path of pmw-stats' sampler).
pub async fn insert_samples(
    ch: &ChClient,
    rows: &[AvailabilitySample],
) -> Result<(), clickhouse::error::Error> {
    super::latency::insert_all(ch, "availability_samples", rows).await
}

/// The aggregate of the samples inside `w` (both bounds applied).
pub async fn window(ch: &ChClient, w: Window) -> Result<AvailabilityAgg, clickhouse::error::Error> {
    ch.query(super::statements::AVAILABILITY_WINDOW)
        .bind(w.from_ms)
        .bind(w.from_ms)
        .bind(w.from_ms)
        .bind(w.from_ms)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_one()
        .await
}
