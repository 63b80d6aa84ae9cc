//! Counters of the delivery engine, read by the service's health and status output.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Serialize;

/// Live counters, shared with the dispatcher's tasks. Read with [`WebhookStats::snapshot`].
#[derive(Debug, Default)]
pub struct WebhookStats {
    pub(crate) delivered: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    pub(crate) failed_final: AtomicU64,
    pub(crate) endpoints_disabled: AtomicU64,
    pub(crate) deliveries_expired: AtomicU64,
    pub(crate) backlog: AtomicU64,
    pub(crate) due: AtomicU64,
    pub(crate) active_endpoints: AtomicU64,
    pub(crate) last_scan_ms: AtomicI64,
    pub(crate) fenced: AtomicBool,
    pub(crate) stopped: AtomicBool,
    pub(crate) last_error: Mutex<Option<String>>,
}

/// A point-in-time copy of [`WebhookStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    /// Deliveries that got a 2xx (since the dispatcher started).
    pub delivered: u64,
    /// Attempts that did not get a 2xx.
    pub failed_attempts: u64,
    /// Deliveries failed for good (attempts exhausted or 410).
    pub failed_final: u64,
    /// Endpoints disabled by this dispatcher (410, or failing for the configured period).
    pub endpoints_disabled: u64,
    /// Pending deliveries expired because this dispatcher disabled their endpoint.
    pub deliveries_expired: u64,
    /// Pending deliveries of enabled endpoints (due or in backoff) at the last scan.
    pub backlog: u64,
    /// Pending deliveries due now at the last scan.
    pub due: u64,
    /// Endpoint queues running now.
    pub active_endpoints: u64,
    /// When the last scan of `webhook_deliveries` completed (ms; 0 = never).
    pub last_scan_ms: i64,
    /// The epoch moved on under this dispatcher: it has stopped.
    pub fenced: bool,
    /// The dispatcher has ended (shutdown, fence or error).
    pub stopped: bool,
    /// The last error seen (database, ClickHouse, task), if any.
    pub last_error: Option<String>,
}

impl WebhookStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            delivered: self.delivered.load(Relaxed),
            failed_attempts: self.failed_attempts.load(Relaxed),
            failed_final: self.failed_final.load(Relaxed),
            endpoints_disabled: self.endpoints_disabled.load(Relaxed),
            deliveries_expired: self.deliveries_expired.load(Relaxed),
            backlog: self.backlog.load(Relaxed),
            due: self.due.load(Relaxed),
            active_endpoints: self.active_endpoints.load(Relaxed),
            last_scan_ms: self.last_scan_ms.load(Relaxed),
            fenced: self.fenced.load(Relaxed),
            stopped: self.stopped.load(Relaxed),
            last_error: self.last_error.lock().map(|g| g.clone()).unwrap_or(None),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn set_error(&self, e: impl ToString) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some(e.to_string());
        }
    }
}
