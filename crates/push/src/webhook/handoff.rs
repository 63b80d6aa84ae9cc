//! The webhook lane's trade deliveries, handed to the dispatcher in memory: the lane inserts
//! them already claimed by its epoch (in the transaction that moves its cursor) and sends them
//! here after the commit, so the common case costs no claim statement and no scan. Whatever
//! does not reach a queue (a queue over [`MAX_AHEAD`], a dispatcher gone) is released or left
//! to the claim path: claimed rows are never lost, at worst taken again after the claim ttl or
//! by a successor's epoch.

use pmw_core::pg::deliveries::Handed;
use tokio::sync::mpsc;

use super::store::Claimed;
use super::NewDelivery;

/// Deliveries a queue holds at most (claimed ahead plus in flight) before hand-offs to it are
/// released back to the claim path instead: a slow endpoint never holds an unbounded backlog
/// in memory.
pub(crate) const MAX_AHEAD: usize = 1024;

/// The sending side, held by the webhook lane.
#[derive(Clone, Debug)]
pub struct Handoff(pub(crate) mpsc::UnboundedSender<Vec<Claimed>>);

impl Handoff {
    /// Hand the committed, claimed trade deliveries (`handed`, with `items` their bodies) to
    /// the dispatcher. A dispatcher that is gone leaves them claimed (see the module doc).
    pub fn send(&self, items: &[NewDelivery], handed: Vec<Handed>) {
        if handed.is_empty() {
            return;
        }
        let rows: Vec<Claimed> = handed
            .into_iter()
            .filter_map(|h| {
                Some(Claimed {
                    delivery: items.get(h.item)?.clone(),
                    attempts: 0,
                    endpoint: h.endpoint,
                })
            })
            .collect();
        if self.0.send(rows).is_err() {
            tracing::warn!(
                "webhook dispatcher gone: handed deliveries stay claimed for a successor"
            );
        }
    }
}
