//! `BlockNotifier`: wakes push with `pg_notify('pmw_blocks', <block>)`, coalesced: at most one
//! NOTIFY in flight, and only the highest pending block number remembered. The payload is the
//! number only; readers always read data from the ledger by cursor. A block seen live wakes push
//! in its own commit statement instead (`sql/commit_block.sql`, one round trip less on the
//! latency path); this task carries the wake-ups of backfilled blocks, unwinds, audit
//! corrections and finality.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::pg::PgPool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The channel push listens on.
pub use pmw_core::channels::BLOCKS as CHANNEL;

/// Counters of the notifier, for tests, heartbeats and metrics.
#[derive(Debug, Default)]
pub struct NotifierStats {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
}

/// Handle to the notifier task.
#[derive(Clone)]
pub struct BlockNotifier {
    pending: Arc<watch::Sender<Option<u64>>>,
    pub stats: Arc<NotifierStats>,
}

impl BlockNotifier {
    /// Start the sending task on `pool`; it stops with `shutdown`.
    pub fn spawn(pool: PgPool, shutdown: CancellationToken) -> BlockNotifier {
        let (tx, rx) = watch::channel(None);
        let stats = Arc::new(NotifierStats::default());
        tokio::spawn(send_loop(pool, rx, stats.clone(), shutdown));
        BlockNotifier {
            pending: Arc::new(tx),
            stats,
        }
    }

    /// Count a wake-up sent inside a block's commit (it shows in `sent` like the others).
    pub fn woke_inline(&self) {
        self.stats.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Ask for a wake-up for `block`. Never blocks; a burst collapses into one NOTIFY carrying
    /// the highest block. A lower number (after a reorg) still causes one more NOTIFY.
    pub fn notify(&self, block: u64) {
        self.pending
            .send_modify(|v| *v = Some(v.map_or(block, |cur| cur.max(block))));
    }
}

async fn send_loop(
    pool: PgPool,
    mut rx: watch::Receiver<Option<u64>>,
    stats: Arc<NotifierStats>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = shutdown.cancelled() => return,
        }
        let Some(block) = *rx.borrow_and_update() else {
            continue;
        };
        // The only sender: one NOTIFY at a time by construction; the gauge makes it observable.
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let result = send(&pool, block).await;
        stats.in_flight.fetch_sub(1, Ordering::SeqCst);
        match result {
            Ok(()) => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(block, error = %e, "block notify failed");
                // Push falls back to polling; try again shortly unless a newer block arrives.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {
                        rx.mark_changed();
                    }
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

async fn send(pool: &PgPool, block: u64) -> Result<(), pmw_core::pg::PgError> {
    let client = pool.get().await?;
    client
        .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &block.to_string()])
        .await?;
    Ok(())
}
