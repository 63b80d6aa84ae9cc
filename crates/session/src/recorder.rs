//! The leader's ClickHouse facts, one writer for all of them: a `push_latency` row per delivered
//! WebSocket frame (channel `ws`) and per delivered webhook (channel `webhook`, with the number
//! of the attempt that delivered it: the dashboard splits first-attempt from eventual), per
//! `pending` pushed (`ws_pending`, `webhook_pending`, with its fill's `pending_id`), and a
//! `delivery_log` row per webhook attempt. Written in small batches by one background task so no
//! send ever waits for ClickHouse; rows that fail to insert are kept and retried, up to a bound
//! (beyond it the oldest are dropped and counted).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_core::ch::latency::{insert_all, insert_push, PushLatencyRow};
use pmw_core::ch::ChClient;
pub use pmw_core::ch::DeliveryLogRow;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Channel name of webhook rows in `push_latency`.
pub const WEBHOOK_CHANNEL: &str = "webhook";
/// `push_latency.channel` of a delivered `final` webhook (WebSocket finals are `ws_final`).
pub const WEBHOOK_FINAL_CHANNEL: &str = "webhook_final";
/// `push_latency.channel` of a delivered `pending` webhook (WebSocket ones are `ws_pending`):
/// detected at the fill's first sighting in a pool, never a trade's stage.
pub const WEBHOOK_PENDING_CHANNEL: &str = "webhook_pending";
/// Rows buffered for ClickHouse before the oldest are dropped (a few seconds of a busy leader's
/// frames: about 10 MB).
const MAX_BUFFERED: usize = 100_000;
/// Rows per INSERT at most.
const BATCH: usize = 20_000;
/// How long a batch gathers rows after its first one: at most about five INSERTs a second per
/// table, however many frames (every INSERT is a part ClickHouse has to merge).
const GATHER: Duration = Duration::from_millis(200);
/// Retry period of a failed insert.
const RETRY: Duration = Duration::from_secs(1);

/// A fact to write.
#[derive(Debug)]
pub enum Fact {
    Attempt(DeliveryLogRow),
    Latency(PushLatencyRow),
}

/// What the writer gave up on and how often ClickHouse refused, for `/health`.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub dropped: AtomicU64,
    pub write_errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// The sending side: cheap to clone, [`Recorder::record`] never waits.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Fact>,
    stats: Arc<RecorderStats>,
    closing: CancellationToken,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
    delivered: Arc<crate::telemetry::Delivered>,
}

impl Recorder {
    pub fn spawn(ch: ChClient, shutdown: CancellationToken) -> Recorder {
        let (tx, rx) = mpsc::channel(MAX_BUFFERED);
        let stats = Arc::new(RecorderStats::default());
        let closing = shutdown.child_token();
        let task = tokio::spawn(run(ch, stats.clone(), rx, closing.clone()));
        Recorder {
            tx,
            stats,
            closing,
            task: Arc::new(Mutex::new(Some(task))),
            delivered: Arc::new(crate::telemetry::Delivered::register()),
        }
    }

    /// Queue a fact without waiting; a full queue drops it (counted).
    pub fn record(&self, fact: Fact) {
        if let Fact::Latency(r) = &fact {
            self.delivered
                .record(&r.channel, r.t_detect_ms, r.t_push_ms);
        }
        if self.tx.try_send(fact).is_err() {
            self.stats.dropped.fetch_add(1, Relaxed);
        }
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    /// Write what is queued (bounded by `within`) and stop; later facts are dropped.
    pub async fn close(&self, within: Duration) {
        self.closing.cancel();
        let task = self.task.lock().expect("recorder lock").take();
        if let Some(mut task) = task {
            if tokio::time::timeout(within, &mut task).await.is_err() {
                tracing::warn!("fact flush timed out");
                task.abort();
            }
        }
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

async fn run(
    ch: ChClient,
    stats: Arc<RecorderStats>,
    mut rx: mpsc::Receiver<Fact>,
    closing: CancellationToken,
) {
    let mut pending = Pending::default();
    loop {
        let wait = if pending.len() == 0 {
            Duration::MAX
        } else {
            RETRY
        };
        let first = tokio::select! {
            f = tokio::time::timeout(wait, rx.recv()) => match f {
                Ok(f) => f,
                Err(_) => {
                    flush(&ch, &stats, &mut pending).await;
                    continue;
                }
            },
            _ = closing.cancelled() => None,
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
    // Closing: what is queued, then a few more tries for what is left.
    rx.close();
    while let Ok(f) = rx.try_recv() {
        pending.push(f);
    }
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
        stats.dropped.fetch_add(pending.len() as u64, Relaxed);
        tracing::warn!(rows = pending.len(), "fact rows dropped at close");
    }
}

async fn flush(ch: &ChClient, stats: &RecorderStats, p: &mut Pending) {
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
        stats.dropped.fetch_add(dropped as u64, Relaxed);
        metrics::counter!(crate::telemetry::FACTS_DROPPED).increment(dropped as u64);
    }
}

fn failed(stats: &RecorderStats, table: &str, e: &clickhouse::error::Error) {
    stats.write_errors.fetch_add(1, Relaxed);
    crate::telemetry::recorder_failed(table);
    if let Ok(mut g) = stats.last_error.lock() {
        *g = Some(format!("clickhouse {table}: {e}"));
    }
    tracing::warn!(table, error = %e, "fact rows not stored yet");
}
