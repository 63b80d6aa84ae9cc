//! What every queue and attempt of one dispatcher shares: the pool, the result writer, the
//! guarded client, the fact recorder, the counters, the settings and the epoch.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use pmw_core::pg::PgPool;

use super::client::GuardedClient;
use super::config::WebhookConfig;
use super::results::Results;
use super::stats::WebhookStats;
use crate::fence::Fence;
use pmw_session::recorder::Recorder;

/// What every queue of one dispatcher shares.
pub(crate) struct Ctx {
    pub pool: PgPool,
    /// Where delivered attempts' results go (batched).
    pub results: Results,
    pub client: GuardedClient,
    pub facts: Recorder,
    pub stats: Arc<WebhookStats>,
    pub cfg: WebhookConfig,
    pub epoch: i64,
    /// How often the dispatcher was woken (new deliveries queued): a running queue whose last
    /// claim was short claims again when this moved.
    pub wakes: AtomicU64,
    /// Chat endpoints rate-limited by their service, and until when (ms): what is claimed for
    /// them meanwhile waits for one digest (`super::chat`).
    pub held: std::sync::Mutex<std::collections::HashMap<i64, i64>>,
}

impl Ctx {
    /// Claims of this epoch made before this are abandoned and may be taken again.
    pub fn stale_before(&self, now: i64) -> i64 {
        now - self.cfg.claim_ttl().as_millis() as i64
    }

    /// The slot and epoch that fence every write.
    pub fn fence(&self) -> Fence {
        Fence {
            slot: self.cfg.slot,
            epoch: self.epoch,
        }
    }
}
