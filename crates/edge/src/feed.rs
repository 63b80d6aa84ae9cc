//! The edge's feed: the leader's WebSocket rounds, read from the stream in order
//! ([`pmw_core::bus::round`]), dispatched into the hub exactly as push's WebSocket lane
//! dispatches them (the same items, [`pmw_core::session::items`]): a rewind first, then the
//! retractions and trades, then the hub's position moves to the part's end. A part that ends
//! where the hub already is (a successor's republish of a longer range) gives only what lies
//! beyond it. A hole (a part starting past the hub, or frames the stream no longer has) is
//! repaired, never skipped: every session is closed with 1012 and resumes from its own position
//! through the ledger stores (on any edge), and the hub moves on.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use pmw_core::bus::round::{RoundPart, ALL};
use pmw_core::bus::{stream, Bus, BusError, Event, Follower};
use pmw_core::pg::PgPool;
use pmw_core::session::hub::{Hub, Stream};
use pmw_core::session::items::round_items;
use pmw_core::{Cursor, Position, UnixMs};
use tokio_util::sync::CancellationToken;

use crate::EdgeError;

/// What the feed has done, for `/health` and the heartbeat.
#[derive(Debug, Default)]
pub struct FeedStats {
    pub parts: AtomicU64,
    pub trades: AtomicU64,
    /// Rows skipped because the hub had passed them (overlapping republish).
    pub overlap: AtomicU64,
    /// Holes repaired (sessions closed 1012 and re-anchored).
    pub repairs: AtomicU64,
    /// When the last part was dispatched (ms).
    pub last_part_ms: AtomicI64,
}

/// Where the hub starts and the follower that continues from there: after the last round part
/// on the stream (the hub stands at its end), or, when the stream holds none, at the push
/// cursor of `slot` (every round up to it was stored before it moved), following what is stored
/// after the stream's last sequence, read first.
pub async fn start(bus: &Bus, pool: &PgPool, slot: i16) -> Result<(Position, Follower), EdgeError> {
    stream::ensure(bus).await?;
    let last_seq = stream::last_seq(bus).await?;
    if let Some((seq, body)) = stream::last_frame(bus, ALL).await? {
        let part = RoundPart::from_body(&body)?;
        tracing::info!(seq, at = %part.through, "feed starts after the stream's last round");
        return Ok((part.through, Follower::start(bus.clone(), ALL, seq)?));
    }
    let row = pool
        .get()
        .await
        .map_err(|e| EdgeError::Store(e.to_string()))?
        .query_opt(
            "SELECT block_number, log_index FROM push_cursor WHERE slot = $1",
            &[&slot],
        )
        .await
        .map_err(|e| EdgeError::Store(e.to_string()))?;
    let at = match row {
        Some(r) => {
            let cursor = Cursor::new(r.get::<_, i64>(0) as u64, r.get::<_, i32>(1) as u32)
                .map_err(|e| EdgeError::Store(format!("push_cursor: {e}")))?;
            Position::maybe(cursor, None)
        }
        None => Position::default(),
    };
    tracing::info!(seq = last_seq, %at, "no round on the stream; feed starts at the push cursor");
    Ok((at, Follower::start(bus.clone(), ALL, last_seq)?))
}

/// Dispatch every round part `follower` yields into `hub` until `shutdown`.
pub async fn run(
    hub: Hub,
    mut follower: Follower,
    stats: Arc<FeedStats>,
    shutdown: CancellationToken,
) -> Result<(), EdgeError> {
    loop {
        let event = tokio::select! {
            e = follower.next() => e?,
            _ = shutdown.cancelled() => return Ok(()),
        };
        let frame = match event {
            Event::Frame(frame) => frame,
            Event::Gap(gap) => {
                tracing::warn!(
                    after = gap.after,
                    seq = gap.frame.seq,
                    "frames missing from the stream; repairing"
                );
                let part = RoundPart::from_body(&gap.frame.body)?;
                repair(&hub, &stats, part.from);
                gap.frame
            }
        };
        let part = RoundPart::from_body(&frame.body)?;
        apply(&hub, &stats, part);
    }
}

/// Close every session (they resume from their own positions through the ledger stores) and
/// move the hub to `to`.
fn repair(hub: &Hub, stats: &FeedStats, to: Position) {
    stats.repairs.fetch_add(1, Ordering::Relaxed);
    hub.close_all(1012);
    hub.dispatch(&[], to);
    tracing::warn!(at = %to, "feed repaired: sessions closed 1012 to resume from the ledger");
}

/// Dispatch one part.
fn apply(hub: &Hub, stats: &FeedStats, part: RoundPart) {
    let at = hub.dispatched();
    if part.rewound {
        hub.rewind(part.from, Stream::Ledger);
    } else if part.from.cursor > at.cursor {
        tracing::warn!(from = %part.from, at = %at, "a round starts past the hub");
        repair(hub, stats, part.from);
    }
    let at = hub.dispatched();
    if let Some(wm) = part.watermark {
        hub.set_head(wm);
    }
    let fresh = |r: &&pmw_core::bus::round::RoundRow| {
        Cursor::new(r.row.block_number, r.row.log_index).is_ok_and(|c| c > at.cursor)
    };
    let skipped = part.rows.iter().filter(|r| !fresh(r)).count();
    let items = round_items(
        part.retracts.iter().map(|r| (&r.row, r.market.as_ref())),
        part.rows
            .iter()
            .filter(fresh)
            .map(|r| (&r.row, r.market.as_ref())),
    );
    if part.through.cursor > at.cursor || !items.is_empty() {
        hub.dispatch(&items, part.through);
    }
    stats.parts.fetch_add(1, Ordering::Relaxed);
    stats
        .trades
        .fetch_add((part.rows.len() - skipped) as u64, Ordering::Relaxed);
    stats.overlap.fetch_add(skipped as u64, Ordering::Relaxed);
    stats.last_part_ms.store(UnixMs::now().0, Ordering::Relaxed);
}

impl From<BusError> for EdgeError {
    fn from(e: BusError) -> Self {
        EdgeError::Bus(e.to_string())
    }
}
