//! The dispatcher's running queues, one task per endpoint: started with what a scan claimed or
//! what the webhook lane handed over, fed further hand-offs while they run, and restarted with
//! what arrived for an endpoint whose queue was just ending.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::context::Ctx;
use super::error::WebhookError;
use super::handoff::MAX_AHEAD;
use super::queue::{claim_limit, release, run_endpoint, Feed, First, Ran};
use super::store::Claimed;

type Sender = mpsc::UnboundedSender<Vec<Claimed>>;

/// Where a queue's first deliveries came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A scan's claim (a full one may have left more due).
    Scan,
    /// The webhook lane's hand-off (or what arrived for a queue that was ending).
    Handoff,
}

/// The queue tasks of one dispatcher.
pub(crate) struct Running {
    pub tasks: JoinSet<(i64, Result<Ran, WebhookError>)>,
    feeds: HashMap<i64, (Sender, Arc<AtomicUsize>)>,
    /// Hand-offs for endpoints whose queue was ending: its successor starts with them.
    stash: HashMap<i64, Vec<Claimed>>,
    stop: CancellationToken,
}

impl Running {
    pub fn new() -> Running {
        Running {
            tasks: JoinSet::new(),
            feeds: HashMap::new(),
            stash: HashMap::new(),
            stop: CancellationToken::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.feeds.len()
    }

    pub fn endpoints(&self) -> Vec<i64> {
        self.feeds.keys().copied().collect()
    }

    /// Start `endpoint`'s queue with `rows` (`seen`: the wake count read before they were
    /// claimed; `from`: where they came from). The caller checked it is not running.
    fn start(
        &mut self,
        ctx: &Arc<Ctx>,
        endpoint: i64,
        rows: Vec<Claimed>,
        seen: u64,
        from: Origin,
    ) {
        // Only a full claim says more may be due: a hand-off is exactly the new deliveries,
        // and anything else queued moves the wake count.
        let more = from == Origin::Scan && rows.len() >= claim_limit(&ctx.cfg);
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(AtomicUsize::new(rows.len()));
        self.feeds.insert(endpoint, (tx, held.clone()));
        let feed = Feed { rx, held };
        let (ctx, stop) = (ctx.clone(), self.stop.clone());
        self.tasks.spawn(async move {
            let first = First { rows, seen, more };
            let r = AssertUnwindSafe(run_endpoint(ctx, endpoint, first, feed, stop))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(WebhookError::Task(format!(
                        "queue of endpoint {endpoint} panicked"
                    )))
                });
            (endpoint, r)
        });
    }

    /// Claimed deliveries (in ledger order per endpoint; a scan's, or the webhook lane's
    /// hand-off) to each endpoint's running queue, or a new one started with them (`seen`: the
    /// wake count read before they were claimed). A queue that already holds [`MAX_AHEAD`] gets
    /// none: those claims are released (its next claim takes them, in order) and the wake
    /// count moves.
    pub fn hand(&mut self, ctx: &Arc<Ctx>, rows: Vec<Claimed>, seen: u64, from: Origin) {
        let mut by_endpoint: HashMap<i64, Vec<Claimed>> = HashMap::new();
        for r in rows {
            by_endpoint
                .entry(r.delivery.endpoint_id)
                .or_default()
                .push(r);
        }
        for (endpoint, rows) in by_endpoint {
            let Some((tx, held)) = self.feeds.get(&endpoint) else {
                self.start(ctx, endpoint, rows, seen, from);
                continue;
            };
            if held.load(Relaxed) >= MAX_AHEAD {
                ctx.wakes.fetch_add(1, Relaxed);
                let ctx = ctx.clone();
                tokio::spawn(async move { release(&ctx, rows.into()).await });
                continue;
            }
            if let Err(mpsc::error::SendError(rows)) = tx.send(rows) {
                self.stash.entry(endpoint).or_default().extend(rows);
            }
        }
    }

    /// `endpoint`'s queue ended: start its successor with what was handed over meanwhile.
    pub fn ended(&mut self, ctx: &Arc<Ctx>, endpoint: i64) {
        self.feeds.remove(&endpoint);
        if let Some(rows) = self.stash.remove(&endpoint) {
            let seen = ctx.wakes.load(Relaxed);
            self.start(ctx, endpoint, rows, seen, Origin::Handoff);
        }
    }

    /// Stop every queue: attempts in flight finish, claims ahead are released.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Forget the stash (fenced or stopping: those claims are taken again by a successor).
    pub fn clear(&mut self) {
        self.stash.clear();
        self.feeds.clear();
    }
}
