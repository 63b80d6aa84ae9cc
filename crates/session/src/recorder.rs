//! The leader's ClickHouse facts, one writer for all of them: a `push_latency` row per delivered
//! WebSocket frame (channel `ws`) and per delivered webhook (channel `webhook`, with the number
//! of the attempt that delivered it: the dashboard splits first-attempt from eventual), per
//! `pending` pushed (`ws_pending`, `webhook_pending`, with its fill's `pending_id`), and a
//! `delivery_log` row per webhook attempt. Written in small batches by one background task so no
//! send ever waits for ClickHouse; rows that fail to insert are kept and retried, up to a bound
//! (beyond it the oldest are dropped and counted). A session sends the rows of a burst of frames
//! as one fact; the queue's bound counts rows.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
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
    /// The rows of one burst of frames a session wrote: one send for the burst.
    Latencies(Vec<PushLatencyRow>),
}

impl Fact {
    fn rows(&self) -> usize {
        match self {
            Fact::Latencies(rows) => rows.len(),
            _ => 1,
        }
    }
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
    tx: mpsc::UnboundedSender<Fact>,
    /// Rows sent and not yet taken by the writer: the queue's bound is in rows.
    queued: Arc<AtomicUsize>,
    stats: Arc<RecorderStats>,
    closing: CancellationToken,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
    delivered: Arc<crate::telemetry::Delivered>,
}

impl Recorder {
    pub fn spawn(ch: ChClient, shutdown: CancellationToken) -> Recorder {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(RecorderStats::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let closing = shutdown.child_token();
        let rx = Queue {
            rx,
            queued: queued.clone(),
        };
        let task = tokio::spawn(run(ch, stats.clone(), rx, closing.clone()));
        Recorder {
            tx,
            queued,
            stats,
            closing,
            task: Arc::new(Mutex::new(Some(task))),
            delivered: Arc::new(crate::telemetry::Delivered::register()),
        }
    }

    /// Queue a fact without waiting; a full queue drops it (counted).
    pub fn record(&self, fact: Fact) {
        match &fact {
            Fact::Latency(r) => self.delivered(r),
            Fact::Latencies(rows) => rows.iter().for_each(|r| self.delivered(r)),
            Fact::Attempt(_) => {}
        }
        let rows = fact.rows();
        if rows == 0 {
            return;
        }
        let full = self.queued.fetch_add(rows, Relaxed) + rows > MAX_BUFFERED;
        if full || self.tx.send(fact).is_err() {
            self.queued.fetch_sub(rows, Relaxed);
            self.stats.dropped.fetch_add(rows as u64, Relaxed);
        }
    }

    fn delivered(&self, r: &PushLatencyRow) {
        self.delivered
            .record(&r.channel, r.t_detect_ms, r.t_push_ms);
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
            Fact::Latencies(rows) => self.latency.extend(rows),
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

/// The writer's side of the queue: what it takes no longer counts against the bound.
struct Queue {
    rx: mpsc::UnboundedReceiver<Fact>,
    queued: Arc<AtomicUsize>,
}

impl Queue {
    async fn recv(&mut self) -> Option<Fact> {
        let f = self.rx.recv().await;
        self.taken(f)
    }

    fn try_recv(&mut self) -> Option<Fact> {
        let f = self.rx.try_recv().ok();
        self.taken(f)
    }

    fn taken(&self, f: Option<Fact>) -> Option<Fact> {
        if let Some(f) = &f {
            self.queued.fetch_sub(f.rows(), Relaxed);
        }
        f
    }

    fn close(&mut self) {
        self.rx.close();
    }
}

async fn run(ch: ChClient, stats: Arc<RecorderStats>, mut rx: Queue, closing: CancellationToken) {
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
    while let Some(f) = rx.try_recv() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> PushLatencyRow {
        PushLatencyRow {
            block_number: 1,
            log_index: 0,
            channel: "ws".into(),
            target_id: 1,
            t_detect_ms: 1,
            t_push_ms: 2,
            epoch: 1,
            backfilled: 0,
            attempt: 0,
            pending_id: 0,
        }
    }

    #[tokio::test]
    async fn the_queue_is_bounded_in_rows_and_counts_every_row_it_drops() {
        // Nothing runs the writer before this test yields: only the queue's bound is at work.
        let ch = ChClient::default().with_url("http://127.0.0.1:9");
        let r = Recorder::spawn(ch, CancellationToken::new());
        r.record(Fact::Latencies(vec![row(); MAX_BUFFERED + 10]));
        assert_eq!(r.stats().dropped.load(Relaxed), (MAX_BUFFERED + 10) as u64);
        r.record(Fact::Latencies(vec![row(); MAX_BUFFERED - 1]));
        r.record(Fact::Latency(row()));
        assert_eq!(r.stats().dropped.load(Relaxed), (MAX_BUFFERED + 10) as u64);
        r.record(Fact::Latency(row()));
        r.record(Fact::Latencies(vec![row(); 3]));
        assert_eq!(r.stats().dropped.load(Relaxed), (MAX_BUFFERED + 14) as u64);
        // An empty burst is no fact.
        r.record(Fact::Latencies(Vec::new()));
        assert_eq!(r.queued.load(Relaxed), MAX_BUFFERED);
    }
}
