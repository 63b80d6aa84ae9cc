//! The latency snapshot: what `/latency.json` serves and `/latency` renders, the completeness
//! audit's report included (types only; availability's are in [`crate::availability`]). A figure with no rows behind it is `null` (never
//! 0); every window, bucket and histogram carries its UTC bounds.

use serde::{Deserialize, Serialize};

use crate::model::Stage;
pub use crate::model::{coverage, Bounds, Coverage};

/// How percentiles are taken, stated in the JSON and on the page.
pub const PERCENTILE_DEFINITION: &str =
    "pN = the value at 0-based rank floor(N/100 × count) of the \
sorted per-row differences (ClickHouse quantileExact), over rows with backfilled = 0 whose time \
lies in [from, to); never a difference of percentiles";

/// The headline label.
pub const HEADLINE_LABEL: &str = "block header received → pushed";

/// p50/p95/p99 and count of one stage over one window; `None` when `count` is 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    pub p99_ms: Option<i64>,
}

impl Percentiles {
    pub const EMPTY: Percentiles = Percentiles {
        count: 0,
        p50_ms: None,
        p95_ms: None,
        p99_ms: None,
    };

    /// From a count and `quantilesExact(0.5, 0.95, 0.99)`; ClickHouse answers 0 on no rows.
    pub fn from_quantiles(count: u64, q: &[i64]) -> Percentiles {
        if count == 0 {
            return Percentiles::EMPTY;
        }
        Percentiles {
            count,
            p50_ms: q.first().copied(),
            p95_ms: q.get(1).copied(),
            p99_ms: q.get(2).copied(),
        }
    }
}

/// p50/p99 and count of one stage over one series bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct P50P99 {
    pub count: u64,
    pub p50_ms: Option<i64>,
    pub p99_ms: Option<i64>,
}

impl P50P99 {
    pub const EMPTY: P50P99 = P50P99 {
        count: 0,
        p50_ms: None,
        p99_ms: None,
    };

    /// From a count and `quantilesExact(0.5, 0.99)`.
    pub fn from_quantiles(count: u64, q: &[i64]) -> P50P99 {
        if count == 0 {
            return P50P99::EMPTY;
        }
        P50P99 {
            count,
            p50_ms: q.first().copied(),
            p99_ms: q.get(1).copied(),
        }
    }
}

/// One value per stage, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stages<T> {
    pub detect_logs: T,
    pub detect_stored: T,
    pub detect_push_ws: T,
    /// Webhooks eventually delivered (retries included).
    pub detect_push_webhook: T,
    /// Webhooks delivered by their first attempt.
    pub detect_push_webhook_first: T,
    /// Block header received → `final` pushed (WebSocket and webhook).
    pub detect_final: T,
}

impl<T: Clone> Stages<T> {
    pub fn all(v: T) -> Stages<T> {
        Stages {
            detect_logs: v.clone(),
            detect_stored: v.clone(),
            detect_push_ws: v.clone(),
            detect_push_webhook: v.clone(),
            detect_push_webhook_first: v.clone(),
            detect_final: v,
        }
    }
}

impl<T> Stages<T> {
    pub fn get(&self, s: Stage) -> &T {
        match s {
            Stage::DetectLogs => &self.detect_logs,
            Stage::DetectStored => &self.detect_stored,
            Stage::DetectPushWs => &self.detect_push_ws,
            Stage::DetectPushWebhook => &self.detect_push_webhook,
            Stage::DetectPushWebhookFirst => &self.detect_push_webhook_first,
            Stage::DetectFinal => &self.detect_final,
        }
    }

    pub fn get_mut(&mut self, s: Stage) -> &mut T {
        match s {
            Stage::DetectLogs => &mut self.detect_logs,
            Stage::DetectStored => &mut self.detect_stored,
            Stage::DetectPushWs => &mut self.detect_push_ws,
            Stage::DetectPushWebhook => &mut self.detect_push_webhook,
            Stage::DetectPushWebhookFirst => &mut self.detect_push_webhook_first,
            Stage::DetectFinal => &mut self.detect_final,
        }
    }
}

/// One dashboard window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowReport {
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    pub coverage: Coverage,
    /// The earliest row of any stage inside the window.
    pub data_since: Option<String>,
    pub stages: Stages<Percentiles>,
}

/// One series bucket (the last is still in progress).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketReport {
    #[serde(flatten)]
    pub bounds: Bounds,
    pub in_progress: bool,
    pub stages: Stages<P50P99>,
}

/// p50/p99 per bucket over time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesReport {
    pub name: String,
    pub bucket_ms: i64,
    #[serde(flatten)]
    pub bounds: Bounds,
    pub buckets: Vec<BucketReport>,
}

/// Both series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub hourly_24h: SeriesReport,
    pub daily_30d: SeriesReport,
}

/// One histogram bin `[lo_ms, hi_ms)`; an open end is `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bin {
    pub label: String,
    pub lo_ms: Option<i64>,
    pub hi_ms: Option<i64>,
    pub count: u64,
}

/// The distribution of the headline stage over the last hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramReport {
    pub stage: String,
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    pub count: u64,
    pub bins: Vec<Bin>,
}

/// The headline figure of one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadlineFigure {
    pub window: String,
    pub count: u64,
    pub p50_ms: Option<i64>,
}

/// "block header received → pushed", p50 per window, over WebSocket deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headline {
    pub label: String,
    pub stage: String,
    pub figures: Vec<HeadlineFigure>,
}

/// `head_lead_ms` (= t_detect_ms − block timestamp) over one window: a clock-drift check, never a
/// latency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadLead {
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    pub count: u64,
    pub p50_ms: Option<i64>,
    pub min_ms: Option<i64>,
    pub max_ms: Option<i64>,
}

/// Rows with any timestamp at or after the snapshot's time (`to` of every window). A row whose own
/// time (`t_detect_ms` for ingest, `t_push_ms` for push) is that late sits in no window; a non-zero
/// count points at a broken clock or a broken write path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowsAfterNow {
    pub ingest_latency: u64,
    pub push_latency: u64,
}

/// Figures for operators, not on the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostics {
    pub head_lead_ms: Vec<HeadLead>,
    pub rows_dated_after_now: RowsAfterNow,
    /// pmw-live's RPC providers now ([`crate::providers`]; filled in by the service from
    /// Postgres after the ClickHouse part).
    #[serde(default)]
    pub rpc_providers: serde_json::Value,
}

/// The audit over one window (by the time each range was audited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditWindow {
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    /// Audited ranges in the window (0: every figure below is `null`).
    pub ranges: u64,
    pub blocks_checked: Option<u64>,
    pub fills_checked: Option<u64>,
    /// Fills on the chain the store lacked (backfilled, flagged `audit`).
    pub missing: Option<u64>,
    /// Stored fills the chain does not have (retracted).
    pub extra: Option<u64>,
    /// The highest block audited in the window.
    pub audited_through_block: Option<u64>,
    /// The most the audit trailed the ingest watermark, in blocks, when it audited a range.
    pub max_trail_blocks: Option<u64>,
    /// The most time between a range's last block (its timestamp) and its audit.
    pub max_trail_ms: Option<i64>,
}

/// The audit now and per window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    pub definition: String,
    /// Every block up to this one was compared with the chain (`null`: not yet).
    pub audited_through_block: Option<u64>,
    pub audited_at: Option<String>,
    /// The ingest watermark (the newest block stored).
    pub head_block: Option<u64>,
    /// head_block − audited_through_block.
    pub trail_blocks: Option<u64>,
    /// Block time of head_block − block time of audited_through_block.
    pub trail_ms: Option<i64>,
    pub windows: Vec<AuditWindow>,
}

/// Everything the dashboard shows, computed at `generated_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub generated_at: String,
    pub generated_at_ms: i64,
    pub percentiles: String,
    pub headline: Headline,
    pub windows: Vec<WindowReport>,
    pub series: Series,
    pub histogram_1h: HistogramReport,
    /// Push and ingest availability per window, from the sampler's rows.
    #[serde(default)]
    pub availability: crate::availability::AvailabilityReport,
    /// The completeness audit (Postgres; filled in by the service after the ClickHouse part).
    #[serde(default)]
    pub audit: AuditReport,
    /// The pending tier beside the confirmed path (ClickHouse and Postgres; filled in by the
    /// service after the ClickHouse part).
    #[serde(default)]
    pub pending: crate::pending::PendingReport,
    pub diagnostics: Diagnostics,
}

impl Snapshot {
    /// The report of window `name`.
    pub fn window(&self, name: &str) -> Option<&WindowReport> {
        self.windows.iter().find(|w| w.window == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rows_is_null_not_zero() {
        assert_eq!(
            Percentiles::from_quantiles(0, &[0, 0, 0]),
            Percentiles::EMPTY
        );
        let json = serde_json::to_value(Percentiles::EMPTY).unwrap();
        assert!(json["p50_ms"].is_null(), "{json}");
        assert_eq!(P50P99::from_quantiles(0, &[0, 0]).p99_ms, None);
        assert_eq!(
            Percentiles::from_quantiles(3, &[1, 2, 3]).p95_ms,
            Some(2),
            "a real zero-count check, not a zero-value check"
        );
    }

    #[test]
    fn coverage_distinguishes_none_partial_full() {
        assert_eq!(coverage(0, 100_000, None), Coverage::None);
        assert_eq!(coverage(0, 100_000, Some(500)), Coverage::Full);
        assert_eq!(coverage(0, 100_000, Some(50_000)), Coverage::Partial);
    }
}
