//! `ingest_latency` rows written off the ingest path. A block's row is handed over after its
//! commit; the writer waits [`GATHER`] (so the insert never competes with push's read of the very
//! block it measures) and inserts what gathered in one statement. A failed insert keeps its rows
//! and tries again with the next batch, after a backoff; beyond [`MAX_HELD`] rows the oldest are
//! dropped, logged and counted (`pmw_live_clickhouse_insert_errors_total{table="ingest_latency"}`
//! counts the failed inserts). On close the writer makes one last attempt.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::ch::ChClient;
use pmw_core::ch::{latency, IngestLatencyRow};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long rows gather before an insert (push reads a block within milliseconds of its commit).
pub const GATHER: Duration = Duration::from_millis(50);
/// Rows held while ClickHouse refuses them (about 3 hours of Polygon blocks).
pub const MAX_HELD: usize = 5_000;
/// How long `close` waits for the last insert.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// The ingester's end: hand a row over (never blocks, never fails the block).
#[derive(Clone)]
pub struct LatencyRows {
    tx: mpsc::UnboundedSender<IngestLatencyRow>,
    /// Rows given up on (dropped while ClickHouse was down, or left at close).
    pub lost: Arc<AtomicU64>,
}

impl LatencyRows {
    pub fn send(&self, row: IngestLatencyRow) {
        if self.tx.send(row).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The writer task.
pub struct LatencyWriter {
    task: JoinHandle<()>,
}

impl LatencyWriter {
    pub fn spawn(ch: ChClient) -> (LatencyRows, LatencyWriter) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lost = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(ch, rx, lost.clone()));
        (LatencyRows { tx, lost }, LatencyWriter { task })
    }

    /// Wait (bounded) until every sender is gone and the last rows were attempted.
    pub async fn close(self) {
        if tokio::time::timeout(CLOSE_WAIT, self.task).await.is_err() {
            tracing::warn!("ingest latency rows still unwritten at shutdown");
        }
    }
}

async fn run(
    ch: ChClient,
    mut rx: mpsc::UnboundedReceiver<IngestLatencyRow>,
    lost: Arc<AtomicU64>,
) {
    let mut held: VecDeque<IngestLatencyRow> = VecDeque::new();
    let mut retry = Backoff::new(Policy::STORE);
    let mut retry_at = tokio::time::Instant::now();
    loop {
        // Wait for a row (or, with rows held after a failure, for the retry time).
        let open = if held.is_empty() {
            match rx.recv().await {
                Some(row) => {
                    held.push_back(row);
                    tokio::time::sleep(GATHER).await;
                    true
                }
                None => false,
            }
        } else {
            tokio::select! {
                _ = tokio::time::sleep_until(retry_at) => true,
                row = rx.recv() => match row {
                    Some(row) => { held.push_back(row); continue }
                    None => false,
                },
            }
        };
        while let Ok(row) = rx.try_recv() {
            held.push_back(row);
        }
        if held.len() > MAX_HELD {
            let dropped = held.len() - MAX_HELD;
            held.drain(..dropped);
            lost.fetch_add(dropped as u64, Ordering::Relaxed);
            tracing::warn!(
                dropped,
                "ingest latency rows dropped: clickhouse refused them too long"
            );
        }
        let rows: Vec<IngestLatencyRow> = held.iter().cloned().collect();
        match latency::insert_ingest(&ch, &rows).await {
            Ok(()) => {
                held.clear();
                retry.reset();
            }
            Err(e) => {
                crate::telemetry::ch_insert_failed("ingest_latency");
                let wait = retry.next_wait();
                tracing::warn!(rows = rows.len(), error = %e, retry_in_ms = wait.as_millis() as u64, "ingest latency rows not stored yet");
                retry_at = tokio::time::Instant::now() + wait;
            }
        }
        if !open {
            if !held.is_empty() {
                lost.fetch_add(held.len() as u64, Ordering::Relaxed);
                tracing::warn!(rows = held.len(), "ingest latency rows lost at shutdown");
            }
            return;
        }
    }
}
