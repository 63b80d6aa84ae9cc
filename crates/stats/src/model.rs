//! What the dashboard measures: the stages, the windows and the series buckets, with their UTC
//! bounds. Every window is `[from_ms, to_ms)` with both bounds applied in every query.

use std::time::Duration;

use pmw_core::ch::Window;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 86_400_000;

/// One latency stage: a per-row difference `end - t_detect_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    DetectLogs,
    DetectStored,
    DetectPushWs,
    /// Webhooks eventually delivered, whichever attempt delivered them (retries included).
    DetectPushWebhook,
    /// Webhooks delivered by their first attempt.
    DetectPushWebhookFirst,
    /// A `final` event pushed (WebSocket or webhook) after the trade's block was finalized.
    DetectFinal,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::DetectLogs,
        Stage::DetectStored,
        Stage::DetectPushWs,
        Stage::DetectPushWebhookFirst,
        Stage::DetectPushWebhook,
        Stage::DetectFinal,
    ];
    /// The headline: block header received → pushed, over WebSocket.
    pub const HEADLINE: Stage = Stage::DetectPushWs;

    /// The key used in the JSON.
    pub fn key(self) -> &'static str {
        match self {
            Stage::DetectLogs => "detect_logs",
            Stage::DetectStored => "detect_stored",
            Stage::DetectPushWs => "detect_push_ws",
            Stage::DetectPushWebhook => "detect_push_webhook",
            Stage::DetectPushWebhookFirst => "detect_push_webhook_first",
            Stage::DetectFinal => "detect_final",
        }
    }

    /// Human label.
    pub fn label(self) -> &'static str {
        match self {
            Stage::DetectLogs => "header received → logs fetched",
            Stage::DetectStored => {
                "header received → committed (trades in Postgres with the watermark)"
            }
            Stage::DetectPushWs => "header received → pushed (WebSocket)",
            Stage::DetectPushWebhook => "header received → pushed (webhook, eventually delivered)",
            Stage::DetectPushWebhookFirst => "header received → pushed (webhook, first attempt)",
            Stage::DetectFinal => "header received → final pushed",
        }
    }

    /// How the per-row difference is computed, for the page's definitions.
    pub fn formula(self) -> &'static str {
        match self {
            Stage::DetectLogs => "ingest_latency: t_logs_ms − t_detect_ms",
            Stage::DetectStored => {
                "ingest_latency: t_stored_ms (the block's trades committed to the Postgres hot ledger with the watermark) − t_detect_ms"
            }
            Stage::DetectPushWs => "push_latency (ws): t_push_ms − t_detect_ms",
            Stage::DetectPushWebhook => {
                "push_latency (webhook, every delivered row whichever attempt delivered it, retries included): t_push_ms − t_detect_ms"
            }
            Stage::DetectPushWebhookFirst => {
                "push_latency (webhook, attempt = 1: delivered by the first attempt): t_push_ms − t_detect_ms"
            }
            Stage::DetectFinal => {
                "push_latency (ws_final and webhook_final: `final` events): t_push_ms − t_detect_ms"
            }
        }
    }
}

/// The four windows of the dashboard, by name and length.
pub const WINDOWS: [(&str, Duration); 4] = [
    ("1h", Duration::from_secs(3_600)),
    ("24h", Duration::from_secs(86_400)),
    ("7d", Duration::from_secs(7 * 86_400)),
    ("30d", Duration::from_secs(30 * 86_400)),
];

/// A named window ending at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedWindow {
    pub name: &'static str,
    pub window: Window,
}

/// The dashboard's windows ending at `now` (`[now − len, now + 1 ms)`).
pub fn windows(now: UnixMs) -> Vec<NamedWindow> {
    WINDOWS
        .iter()
        .map(|(name, len)| NamedWindow {
            name,
            window: Window::ending_at(now, *len),
        })
        .collect()
}

/// A time series: `count` buckets of `bucket_ms` aligned on UTC boundaries, the last one ending at
/// `now + 1 ms` (in progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesSpec {
    pub name: &'static str,
    pub bucket_ms: i64,
    pub count: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl SeriesSpec {
    pub fn new(name: &'static str, bucket_ms: i64, count: i64, now: UnixMs) -> SeriesSpec {
        let current = now.0.div_euclid(bucket_ms) * bucket_ms;
        SeriesSpec {
            name,
            bucket_ms,
            count,
            from_ms: current - (count - 1) * bucket_ms,
            to_ms: now.0 + 1,
        }
    }

    /// Per hour over the last 24 hours (the last hour in progress).
    pub fn hourly_24h(now: UnixMs) -> SeriesSpec {
        SeriesSpec::new("hourly_24h", HOUR_MS, 24, now)
    }

    /// Per UTC day over the last 30 days (today in progress).
    pub fn daily_30d(now: UnixMs) -> SeriesSpec {
        SeriesSpec::new("daily_30d", DAY_MS, 30, now)
    }

    pub fn window(&self) -> Window {
        Window {
            from_ms: self.from_ms,
            to_ms: self.to_ms,
        }
    }

    /// Bounds of bucket `i` (the last one is cut at `to_ms`).
    pub fn bucket(&self, i: i64) -> Window {
        let from_ms = self.from_ms + i * self.bucket_ms;
        Window {
            from_ms,
            to_ms: (from_ms + self.bucket_ms).min(self.to_ms),
        }
    }
}

/// ISO-8601 UTC with milliseconds and `Z`.
pub fn iso(ms: i64) -> String {
    UnixMs(ms).to_rfc3339()
}

/// Whether the recorded history covers a window: `none` (no rows at all), `partial` (the first row
/// comes later than 1 % of the window's length after its start) or `full`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coverage {
    Full,
    Partial,
    None,
}

/// Coverage of `[from_ms, to_ms)` given the earliest row inside it.
pub fn coverage(from_ms: i64, to_ms: i64, first_ms: Option<i64>) -> Coverage {
    match first_ms {
        None => Coverage::None,
        Some(first) if first - from_ms > (to_ms - from_ms) / 100 => Coverage::Partial,
        Some(_) => Coverage::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_two_sided_and_distinct() {
        let now = UnixMs(1_764_672_000_123);
        let ws = windows(now);
        assert_eq!(ws.len(), 4);
        for w in &ws {
            assert_eq!(w.window.to_ms, now.0 + 1);
        }
        assert_eq!(ws[0].window.from_ms, now.0 - HOUR_MS);
        assert_eq!(ws[3].window.from_ms, now.0 - 30 * DAY_MS);
    }

    #[test]
    fn series_buckets_are_utc_aligned() {
        // 2025-12-02T10:40:00.123Z
        let now = UnixMs(1_764_672_000_123);
        let h = SeriesSpec::hourly_24h(now);
        assert_eq!(iso(h.from_ms), "2025-12-01T11:00:00.000Z");
        assert_eq!(iso(h.bucket(23).from_ms), "2025-12-02T10:00:00.000Z");
        assert_eq!(h.bucket(23).to_ms, now.0 + 1);
        let d = SeriesSpec::daily_30d(now);
        assert_eq!(iso(d.from_ms), "2025-11-03T00:00:00.000Z");
        assert_eq!(iso(d.bucket(29).from_ms), "2025-12-02T00:00:00.000Z");
    }
}

/// UTC bounds of a window or bucket, `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    pub from: String,
    pub to: String,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Bounds {
    pub fn new(from_ms: i64, to_ms: i64) -> Bounds {
        Bounds {
            from: iso(from_ms),
            to: iso(to_ms),
            from_ms,
            to_ms,
        }
    }
}
