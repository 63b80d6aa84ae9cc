//! Push latency rows: one per delivered WS frame, batched into ClickHouse off the send path.

use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::store::{latency, PushLatencyRow};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const FLUSH_EVERY: Duration = Duration::from_millis(500);
const MAX_BATCH: usize = 10_000;

/// Sender side; `record` never blocks (rows beyond the channel's capacity are counted as lost).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<PushLatencyRow>,
    lost: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Recorder {
    pub fn spawn(ch: ChClient, shutdown: CancellationToken) -> Recorder {
        let (tx, rx) = mpsc::channel(100_000);
        tokio::spawn(flush_loop(ch, rx, shutdown));
        Recorder {
            tx,
            lost: Default::default(),
        }
    }

    pub fn record(&self, row: PushLatencyRow) {
        if self.tx.try_send(row).is_err() {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn lost(&self) -> u64 {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }
}

async fn flush_loop(
    ch: ChClient,
    mut rx: mpsc::Receiver<PushLatencyRow>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::new();
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = shutdown.cancelled() => true,
        };
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            match latency::insert_push(&ch, &batch).await {
                Ok(()) => batch.clear(),
                Err(e) => {
                    tracing::warn!(rows = batch.len(), error = %e, "push latency rows not stored yet");
                    if batch.len() >= MAX_BATCH {
                        tracing::warn!(rows = batch.len(), "push latency rows dropped");
                        batch.clear();
                    }
                }
            }
        }
        if stop {
            return;
        }
    }
}
