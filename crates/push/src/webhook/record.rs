//! ClickHouse facts of the delivery engine: one `delivery_log` row per attempt and one
//! `push_latency` row (channel `webhook`) per delivered message. Written in small batches by one
//! background task so an attempt never waits for ClickHouse; rows that fail to insert are kept
//! and retried, up to a bound.

use std::sync::Arc;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::store::latency::{insert_all, insert_push, PushLatencyRow};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::stats::WebhookStats;

/// Channel name of webhook rows in `push_latency`.
pub const CHANNEL: &str = "webhook";
/// Rows buffered for ClickHouse before the oldest are dropped.
const MAX_BUFFERED: usize = 20_000;
/// Rows per INSERT.
const BATCH: usize = 1_000;
/// How long a batch gathers rows after its first one.
const GATHER: Duration = Duration::from_millis(50);
/// Retry period of a failed insert.
const RETRY: Duration = Duration::from_secs(1);

/// One webhook attempt (`delivery_log`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct DeliveryLogRow {
    pub delivery_id: String,
    pub endpoint_id: u64,
    pub account_id: u64,
    pub attempt: u32,
    pub kind: String,
    pub block_number: u64,
    pub log_index: u32,
    pub t_attempt_ms: i64,
    pub duration_ms: i64,
    /// 0 when no response arrived.
    pub status_code: u16,
    /// [`super::retry::Outcome::as_str`].
    pub outcome: String,
    pub error: String,
}

/// A fact to write.
#[derive(Debug)]
pub(crate) enum Fact {
    Attempt(DeliveryLogRow),
    Latency(PushLatencyRow),
}

/// The writer task and the sending side of its queue.
pub(crate) struct Recorder {
    pub tx: mpsc::Sender<Fact>,
    task: JoinHandle<()>,
}

impl Recorder {
    pub fn spawn(ch: ChClient, stats: Arc<WebhookStats>) -> Recorder {
        let (tx, rx) = mpsc::channel(MAX_BUFFERED);
        let task = tokio::spawn(run(ch, stats, rx));
        Recorder { tx, task }
    }

    /// Flush what is queued (bounded by `within`) and stop. Other senders must be gone.
    pub async fn close(self, within: Duration) {
        drop(self.tx);
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            tracing::warn!("webhook log flush timed out");
            task.abort();
        }
    }
}

/// Queue a fact without waiting; a full queue drops it (counted).
pub(crate) fn send(tx: &mpsc::Sender<Fact>, stats: &WebhookStats, fact: Fact) {
    if tx.try_send(fact).is_err() {
        WebhookStats::add(&stats.log_rows_dropped, 1);
    }
}

#[derive(Default)]
struct Pending {
    attempts: Vec<DeliveryLogRow>,
    latency: Vec<PushLatencyRow>,
}

impl Pending {
    fn len(&self) -> usize {
        self.attempts.len() + self.latency.len()
    }

    fn push(&mut self, f: Fact) {
        match f {
            Fact::Attempt(r) => self.attempts.push(r),
            Fact::Latency(r) => self.latency.push(r),
        }
    }

    /// Drop the oldest rows beyond the bound (attempt rows first); returns how many.
    fn trim(&mut self) -> usize {
        let excess = self.len().saturating_sub(MAX_BUFFERED);
        let a = excess.min(self.attempts.len());
        self.attempts.drain(..a);
        let l = (excess - a).min(self.latency.len());
        self.latency.drain(..l);
        excess
    }
}

async fn run(ch: ChClient, stats: Arc<WebhookStats>, mut rx: mpsc::Receiver<Fact>) {
    let mut pending = Pending::default();
    loop {
        let first = if pending.len() == 0 {
            rx.recv().await
        } else {
            match tokio::time::timeout(RETRY, rx.recv()).await {
                Ok(f) => f,
                Err(_) => {
                    flush(&ch, &stats, &mut pending).await;
                    continue;
                }
            }
        };
        let Some(first) = first else { break };
        pending.push(first);
        let deadline = tokio::time::Instant::now() + GATHER;
        while pending.len() < BATCH {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(f)) => pending.push(f),
                _ => break,
            }
        }
        flush(&ch, &stats, &mut pending).await;
    }
    // Closing: a few more tries for what is left.
    for _ in 0..3 {
        if pending.len() == 0 {
            break;
        }
        flush(&ch, &stats, &mut pending).await;
        if pending.len() > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    if pending.len() > 0 {
        WebhookStats::add(&stats.log_rows_dropped, pending.len() as u64);
        tracing::warn!(rows = pending.len(), "webhook log rows dropped at close");
    }
}

async fn flush(ch: &ChClient, stats: &WebhookStats, p: &mut Pending) {
    if !p.attempts.is_empty() {
        match insert_all(ch, "delivery_log", &p.attempts).await {
            Ok(()) => p.attempts.clear(),
            Err(e) => failed(stats, "delivery_log", &e),
        }
    }
    if !p.latency.is_empty() {
        match insert_push(ch, &p.latency).await {
            Ok(()) => p.latency.clear(),
            Err(e) => failed(stats, "push_latency", &e),
        }
    }
    let dropped = p.trim();
    if dropped > 0 {
        WebhookStats::add(&stats.log_rows_dropped, dropped as u64);
    }
}

fn failed(stats: &WebhookStats, table: &str, e: &clickhouse::error::Error) {
    WebhookStats::add(&stats.log_write_errors, 1);
    stats.set_error(format!("clickhouse {table}: {e}"));
    tracing::warn!(table, error = %e, "webhook log insert failed");
}
