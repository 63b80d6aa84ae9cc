//! The feed's watchdog: push moves its cursor only after the broker stored the round, so while
//! push's cursor is past the hub's position, the frames are on the stream and this edge does not
//! have them. When that lasts [`EdgeConfig::edge_feed_stall_ms`] with the hub not moving at all,
//! the follower is stuck (whatever the cause: consumers that cannot be made, a chain it refuses)
//! and the edge ends (exit 75): its supervisor starts it again at the stream's last round, and its
//! sessions resume from the ledger on any edge. Nothing is lost; an edge that delivers nothing
//! while push publishes is never left serving.
//!
//! [`EdgeConfig::edge_feed_stall_ms`]: crate::EdgeConfig

use std::time::{Duration, Instant};

use pmw_core::pg::PgPool;
use pmw_core::Cursor;
use pmw_session::hub::Hub;

use crate::EdgeError;

/// How often push's cursor is compared with the hub's position.
const EVERY: Duration = Duration::from_secs(1);

/// Watch until the feed is stalled for `stall`; then the error that ends the edge.
pub async fn run(hub: Hub, pool: PgPool, slot: i16, stall: Duration) -> EdgeError {
    let mut watch = Stall::default();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Unreadable (a Postgres restart): no verdict this time.
        let push = match crate::feed::cursor_of(&pool, "push_cursor", slot).await {
            Ok(p) => p.cursor,
            Err(e) => {
                tracing::debug!(error = %e, "feed watchdog: push's cursor unreadable");
                continue;
            }
        };
        let hub_at = hub.dispatched().cursor;
        if let Some(behind) = watch.observe(push, hub_at, Instant::now()) {
            if behind >= stall {
                tracing::error!(push = %push, hub = %hub_at, stalled_ms = behind.as_millis() as u64, "feed stalled: push's cursor is past the hub and the hub does not move; restarting the edge");
                return EdgeError::Bus(format!(
                    "feed stalled for {} ms behind push's cursor {push} (hub at {hub_at})",
                    behind.as_millis()
                ));
            }
        }
    }
}

/// Since when the hub has stood still behind push's cursor.
#[derive(Debug, Default)]
struct Stall {
    /// The hub's position when it was first seen behind, and when.
    since: Option<(Cursor, Instant)>,
}

impl Stall {
    /// How long the hub has stood still behind push (`None`: it is not behind, or it moved).
    fn observe(&mut self, push: Cursor, hub: Cursor, now: Instant) -> Option<Duration> {
        if push <= hub {
            self.since = None;
            return None;
        }
        match self.since {
            Some((at, since)) if at == hub => Some(now - since),
            _ => {
                self.since = Some((hub, now));
                Some(Duration::ZERO)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(block: u64) -> Cursor {
        Cursor::new(block, 0).unwrap()
    }

    #[test]
    fn only_a_hub_standing_still_behind_push_counts_as_stalled() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = Stall::default();
        assert_eq!(w.observe(c(5), c(5), s(0)), None, "level: not behind");
        assert_eq!(w.observe(c(6), c(5), s(1)), Some(Duration::ZERO));
        assert_eq!(w.observe(c(7), c(5), s(4)), Some(Duration::from_secs(3)));
        // The hub moved (still behind): the clock starts again.
        assert_eq!(w.observe(c(8), c(6), s(5)), Some(Duration::ZERO));
        assert_eq!(w.observe(c(8), c(6), s(9)), Some(Duration::from_secs(4)));
        // Caught up: nothing.
        assert_eq!(w.observe(c(8), c(8), s(10)), None);
        assert_eq!(w.observe(c(9), c(8), s(11)), Some(Duration::ZERO));
    }
}
