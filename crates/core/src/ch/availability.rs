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
    /// How long the oldest trade the webhook lane owes has been readable (0: none owed; -1: no
    /// webhook cursor, not measured).
    pub webhook_lag_ms: i64,
    pub webhook_ok: u8,
    pub webhook_down_since_ms: i64,
    /// 0 when Postgres did not answer this sample's read.
    pub pg_ok: u8,
    /// 0 when the sampler's last write to ClickHouse had failed.
    pub ch_ok: u8,
    /// The push leader's epoch (0: unknown).
    pub push_epoch: i64,
    /// The pmw-live instance whose writer heartbeat was read ('' : none).
    pub live_instance: String,
    /// RPC providers the live leader did not count as healthy.
    pub providers_demoted: u32,
    /// The latest start of any pmw service instance but pmw-stats (0: none), and which service.
    pub newest_start_ms: i64,
    pub newest_start_service: String,
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
    /// The first sampled second (ms; 0 without samples).
    pub first_ms: i64,
}

/// One UTC day's aggregate (`day`: days since the epoch), as [`AvailabilityAgg`] without lags.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, clickhouse::Row)]
pub struct DayAgg {
    pub day: i64,
    pub sampled: u64,
    pub push_ok_s: u64,
    pub ingest_ok_s: u64,
    pub push_gap_ms: i64,
    pub push_gap_from_ms: i64,
    pub ingest_gap_ms: i64,
    pub ingest_gap_from_ms: i64,
}

/// One run of failing samples of one part (`push`, `ingest` or `webhook`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, clickhouse::Row)]
pub struct RunRow {
    pub part: String,
    pub since_ms: i64,
    pub last_ms: i64,
    pub samples: u64,
}

/// What the samples of a time range recorded about causes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, clickhouse::Row)]
pub struct CauseAgg {
    pub samples: u64,
    pub pg_all_ok: u8,
    pub ch_all_ok: u8,
    pub epoch_min: i64,
    pub epoch_max: i64,
    pub live_instances: u64,
    pub demoted_max: u32,
    pub started_ms: i64,
    pub started_service: String,
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

/// Per UTC day, the aggregates of the samples inside `w`, in day order (days without samples
/// are absent).
pub async fn days(ch: &ChClient, w: Window) -> Result<Vec<DayAgg>, clickhouse::error::Error> {
    ch.query(super::statements::AVAILABILITY_DAYS)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all()
        .await
}

/// The runs of failing samples lasting at least `threshold_ms` whose last sample lies in `w`.
pub async fn runs(
    ch: &ChClient,
    w: Window,
    threshold_ms: i64,
) -> Result<Vec<RunRow>, clickhouse::error::Error> {
    let mut q = ch.query(super::statements::AVAILABILITY_RUNS);
    for _ in 0..3 {
        q = q.bind(w.from_ms).bind(w.to_ms).bind(threshold_ms);
    }
    q.fetch_all().await
}

/// What the samples inside `w` recorded about causes.
pub async fn causes(ch: &ChClient, w: Window) -> Result<CauseAgg, clickhouse::error::Error> {
    ch.query(super::statements::AVAILABILITY_CAUSES)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_one()
        .await
}

/// The newest sample's time inside `w` (0: none).
pub async fn newest(ch: &ChClient, w: Window) -> Result<i64, clickhouse::error::Error> {
    ch.query(super::statements::AVAILABILITY_NEWEST)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_one()
        .await
}
