//! The edge's feed: the leader's WebSocket rounds, read from the stream in order
//! ([`pmw_session::bus::round`]), dispatched into the hub exactly as push's WebSocket lane
//! dispatches them, and the `final` rounds as its finality lane does (the same items,
//! [`pmw_session::items`]): a rewind first, then the retractions and trades (or finals),
//! then the stream's position in the hub moves to the part's end. A part that ends
//! where the hub already is (a successor's republish of a longer range) gives only what lies
//! beyond it. A hole (a part starting past the hub, or frames the stream no longer has) is
//! repaired, never skipped: every session is closed with 1012 and resumes from its own position
//! through the ledger stores (on any edge), and the hub moves on.
//!
//! Only frames the leader signed reach the hub (the follower verifies them,
//! [`pmw_session::bus::sign`]): a refused message (junk, a forgery, an unknown key, a stale epoch,
//! a replay, or a signed part that does not decode) is skipped, counted
//! ([`REFUSED_TOTAL`]) and logged, and `/health` says `degraded` for [`DEGRADED_FOR`] after it;
//! the feed goes on. It never ends the edge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::ch::TradeRow;
use pmw_core::pg::PgPool;
use pmw_core::{Cursor, Position, UnixMs};
use pmw_session::bus::round::{RoundPart, Stream as BusStream, ALL};
use pmw_session::bus::sign::Refusal;
use pmw_session::bus::{stream, Bus, BusError, Event, Follower};
use pmw_session::hub::{Hub, Stream};
use pmw_session::items::{final_items, round_items};
use tokio_util::sync::CancellationToken;

use crate::EdgeError;

/// `pmw_edge_feed_stage_seconds{stage}` (histogram): a round part's way through the edge:
/// `broker` (stored by the stream's leader → read by this edge's follower), `decode` (the
/// part's JSON), `dispatch` (its items queued to the sessions).
pub const STAGE_SECONDS: &str = "pmw_edge_feed_stage_seconds";

/// `pmw_edge_frames_refused_total{reason}` (counter): messages on the frames subject the feed
/// refused and skipped: `unsigned`, `forged`, `unknown_key`, `malformed`, `stale_epoch`,
/// `replayed`, `undecodable` (docs/OPERATIONS.md, "Frame signing").
pub const REFUSED_TOTAL: &str = "pmw_edge_frames_refused_total";

/// How long after a refusal `/health` says `degraded`.
pub const DEGRADED_FOR: Duration = Duration::from_secs(600);

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
    /// Messages refused, by reason.
    pub refused: Mutex<BTreeMap<&'static str, u64>>,
    /// When the last message was refused (ms; 0: never).
    pub last_refused_ms: AtomicI64,
}

impl FeedStats {
    /// Count a refused message.
    pub fn refuse(&self, reason: Refusal) {
        *self
            .refused
            .lock()
            .expect("refused")
            .entry(reason.reason())
            .or_default() += 1;
        self.last_refused_ms
            .store(UnixMs::now().0, Ordering::Relaxed);
        metrics::counter!(REFUSED_TOTAL, "reason" => reason.reason()).increment(1);
    }

    /// Whether a message was refused within [`DEGRADED_FOR`] of `now_ms`.
    pub fn degraded(&self, now_ms: i64) -> bool {
        let at = self.last_refused_ms.load(Ordering::Relaxed);
        at > 0 && now_ms - at < DEGRADED_FOR.as_millis() as i64
    }
}

/// Where the hub's two streams start, and the follower that continues from there: after the
/// stream's last round part (its stream stands at the part's end), else at push's cursors of
/// `slot` (every round up to a cursor was stored before it moved), following every round stored
/// (a part stored between the reads comes again, and what the hub passed is skipped).
pub struct Start {
    pub ledger: Position,
    pub finals: Position,
    pub follower: Follower,
}

/// [`start`], asked again (with a warning and a backoff) while the broker or Postgres does not
/// answer: an edge started while a NATS node is down, or just after push made the stream (whose
/// replicas may not answer reads yet), waits rather than exits. `None`: `shutdown` came first.
pub async fn start_waiting(
    bus: &Bus,
    pool: &PgPool,
    slot: i16,
    shutdown: &CancellationToken,
) -> Result<Option<Start>, EdgeError> {
    let mut backoff = Backoff::new(Policy::STORE);
    loop {
        let e = tokio::select! {
            at = start(bus, pool, slot) => match at {
                Ok(at) => return Ok(Some(at)),
                Err(e @ (EdgeError::BusUnavailable(_) | EdgeError::Store(_))) => e,
                Err(e) => return Err(e),
            },
            _ = shutdown.cancelled() => return Ok(None),
        };
        let wait = backoff.next_wait();
        tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "feed start failed; asking again");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}

pub async fn start(bus: &Bus, pool: &PgPool, slot: i16) -> Result<Start, EdgeError> {
    stream::expect(bus).await?;
    let last_seq = stream::last_seq(bus).await?;
    // The last part the leader signed (junk stored after it is passed over).
    let last = stream::last_frame(bus, ALL, &bus.config.keys()).await?;
    let ledger = cursor_of(pool, "push_cursor", slot).await?;
    let finals = cursor_of(pool, "final_cursor", slot).await?;
    let mut at = Start {
        ledger,
        finals,
        // No round on the stream: the first one chains to none (its `Pmw-Prev` is 0), whatever
        // the stream's last message is (push's epoch claim, made at its first round).
        follower: Follower::start(bus.clone(), ALL, 0)?,
    };
    let last = last.and_then(|(seq, body)| match RoundPart::from_body(&body) {
        Ok(part) => Some((seq, part)),
        Err(e) => {
            tracing::warn!(seq, error = %e, "the stream's last signed part does not decode; starting at push's cursors");
            None
        }
    });
    if let Some((seq, part)) = last {
        match part.stream {
            BusStream::Ledger => at.ledger = part.through,
            BusStream::Final => at.finals = part.through,
            // No ledger position: the positions stay push's cursors.
            BusStream::Pending => {}
        }
        at.follower = Follower::start(bus.clone(), ALL, seq)?;
        tracing::info!(seq, ledger = %at.ledger, finals = %at.finals, "feed starts after the stream's last round");
    } else {
        tracing::info!(seq = last_seq, ledger = %at.ledger, finals = %at.finals, "no round on the stream; feed starts at push's cursors");
    }
    Ok(at)
}

/// Push's cursor in `table` (`push_cursor`, `final_cursor`) for `slot` (the start of the
/// ledger when there is none yet).
pub(crate) async fn cursor_of(
    pool: &PgPool,
    table: &str,
    slot: i16,
) -> Result<Position, EdgeError> {
    let sql = format!("SELECT block_number, log_index FROM {table} WHERE slot = $1");
    let row = pool
        .get()
        .await
        .map_err(|e| EdgeError::Store(e.to_string()))?
        .query_opt(&sql, &[&slot])
        .await
        .map_err(|e| EdgeError::Store(e.to_string()))?;
    let Some(r) = row else {
        return Ok(Position::default());
    };
    let cursor = Cursor::new(r.get::<_, i64>(0) as u64, r.get::<_, i32>(1) as u32)
        .map_err(|e| EdgeError::Store(format!("{table}: {e}")))?;
    Ok(Position::maybe(cursor, None))
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
            Event::Refused(r) => {
                stats.refuse(r.reason);
                continue;
            }
            Event::Gap(gap) => {
                tracing::warn!(
                    after = gap.after,
                    seq = gap.frame.seq,
                    "frames missing from the stream; repairing"
                );
                // The missing frames may be of either stream: every session resumes from the
                // ledger now, and each stream's position jumps when its next part shows the
                // hole ([`apply`]).
                close_sessions(&hub, &stats);
                gap.frame
            }
        };
        let received = Received::now();
        let part = match RoundPart::from_body(&frame.body) {
            Ok(part) => part,
            Err(e) => {
                tracing::warn!(seq = frame.seq, error = %e, "feed part refused: undecodable");
                stats.refuse(Refusal::Undecodable);
                continue;
            }
        };
        let decoded = Instant::now();
        let newest = TradeRow::newest_live_detect_ms(part.rows.iter().map(|r| &r.row));
        apply(&hub, &stats, part);
        stages(frame.stored_ms, received, decoded, newest);
    }
}

/// When a part was received: on the monotonic clock (stage durations) and the wall clock (against
/// the broker's store time and the block's detection).
struct Received {
    at: Instant,
    ms: i64,
}

impl Received {
    fn now() -> Received {
        Received {
            at: Instant::now(),
            ms: UnixMs::now().0,
        }
    }
}

/// How long a part took from the broker's store to its dispatch into the hub
/// ([`STAGE_SECONDS`]), and (debug log) how long after the newest trade's block was detected
/// each step ended.
fn stages(stored_ms: i64, received: Received, decoded: Instant, newest: Option<i64>) {
    let Received {
        at: received,
        ms: received_ms,
    } = received;
    let dispatched = Instant::now();
    if stored_ms > 0 {
        let broker = (received_ms - stored_ms).max(0) as f64 / 1e3;
        metrics::histogram!(STAGE_SECONDS, "stage" => "broker").record(broker);
    }
    metrics::histogram!(STAGE_SECONDS, "stage" => "decode")
        .record((decoded - received).as_secs_f64());
    metrics::histogram!(STAGE_SECONDS, "stage" => "dispatch")
        .record((dispatched - decoded).as_secs_f64());
    if let Some(detect) = newest {
        let since = |t: Instant| received_ms + (t - received).as_millis() as i64 - detect;
        tracing::debug!(
            stored = stored_ms - detect,
            received = received_ms - detect,
            decoded = since(decoded),
            dispatched = since(dispatched),
            "feed part after detect (ms)"
        );
    }
}

/// A `pending` part: its `pending`s and `void`s to the sessions that opted in, no position moved
/// (as push's pending lane dispatches them).
fn apply_pending(hub: &Hub, stats: &FeedStats, part: RoundPart) {
    let items: Vec<_> = part
        .pending
        .iter()
        .map(|e| e.row.item(e.market.as_ref()))
        .collect();
    hub.dispatch_pending(&items);
    // Counted as a part; not as the ledger's progress (`last_part_ms`): only rounds move that.
    stats.parts.fetch_add(1, Ordering::Relaxed);
}

/// Close every session: they resume from their own positions through the ledger stores.
fn close_sessions(hub: &Hub, stats: &FeedStats) {
    stats.repairs.fetch_add(1, Ordering::Relaxed);
    hub.close_all(1012);
    tracing::warn!("feed repaired: sessions closed 1012 to resume from the ledger");
}

/// Dispatch one part to its stream.
fn apply(hub: &Hub, stats: &FeedStats, part: RoundPart) {
    let stream = match part.stream {
        BusStream::Ledger => Stream::Ledger,
        BusStream::Final => Stream::Final,
        BusStream::Pending => return apply_pending(hub, stats, part),
    };
    let position = |hub: &Hub| match stream {
        Stream::Ledger => hub.dispatched(),
        Stream::Final | Stream::Pending => hub.final_dispatched(),
    };
    let at = position(hub);
    if part.rewound {
        hub.rewind(part.from, stream);
    } else if part.from.cursor > at.cursor {
        // A hole: what lies between was lost; sessions resume from the ledger and the stream
        // moves on from here.
        tracing::warn!(from = %part.from, at = %at, "a round starts past the hub");
        close_sessions(hub, stats);
        hub.dispatch_stream(&[], part.from, stream);
    }
    let at = position(hub);
    if let Some(wm) = part.watermark {
        hub.set_head(wm);
    }
    let fresh = |r: &&pmw_session::bus::round::RoundRow| {
        Cursor::new(r.row.block_number, r.row.log_index).is_ok_and(|c| c > at.cursor)
    };
    let skipped = part.rows.iter().filter(|r| !fresh(r)).count();
    // The pending fill each trade confirmed, by identity (none for most rounds).
    let key = |r: &TradeRow| (r.block_number, r.log_index, r.block_hash.clone());
    let confirmed: std::collections::HashMap<_, i64> = part
        .rows
        .iter()
        .chain(&part.retracts)
        .filter_map(|r| r.pending_id.map(|id| (key(&r.row), id)))
        .collect();
    let retracts = part.retracts.iter().map(|r| (&r.row, r.market.as_ref()));
    let rows = part
        .rows
        .iter()
        .filter(fresh)
        .map(|r| (&r.row, r.market.as_ref()));
    let items = match part.stream {
        BusStream::Ledger => round_items(retracts, rows, |row| confirmed.get(&key(row)).copied()),
        BusStream::Final | BusStream::Pending => final_items(retracts, rows),
    };
    if part.through.cursor > at.cursor || !items.is_empty() {
        hub.dispatch_stream(&items, part.through, stream);
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
        match e {
            BusError::Unavailable(_) => EdgeError::BusUnavailable(e.to_string()),
            e => EdgeError::Bus(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use pmw_core::ch::TradeRow;
    use pmw_session::bus::round::{RoundRow, Stream as BusStream};

    use super::*;

    fn row(block: u64, log_index: u32) -> RoundRow {
        RoundRow {
            row: TradeRow {
                block_number: block,
                log_index,
                block_hash: format!("0x{:064x}", block),
                tx_hash: format!("0x{:064x}", 1),
                block_time_ms: 1_700_000_000_000,
                exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
                exchange_version: 1,
                order_hash: format!("0x{:064x}", 2),
                maker: "0x00000000000000000000000000000000000000aa".into(),
                taker: "0x00000000000000000000000000000000000000bb".into(),
                side: 0,
                token_id: "1".into(),
                shares: "1".into(),
                collateral: "0.5".into(),
                price: "0.5".into(),
                fee: "0".into(),
                fee_asset: "collateral".into(),
                t_detect_ms: 1_700_000_000_100,
                backfilled: 0,
                retracted: 0,
                version: 1,
                audit: 0,
            },
            market: None,
            pending_id: None,
        }
    }

    fn at(block: u64, log_index: u32) -> Position {
        Position::maybe(Cursor::new(block, log_index).unwrap(), None)
    }

    fn part(
        stream: BusStream,
        from: Position,
        through: Position,
        rows: Vec<RoundRow>,
    ) -> RoundPart {
        RoundPart {
            stream,
            from,
            through,
            rewound: false,
            reorg_id: 0,
            watermark: Some(through.cursor.block),
            retracts: vec![],
            rows,
            pending: vec![],
        }
    }

    #[test]
    fn contiguous_parts_move_the_hub_and_an_overlap_gives_only_what_lies_beyond() {
        let hub = Hub::new(at(10, 0));
        let stats = FeedStats::default();
        apply(
            &hub,
            &stats,
            part(
                BusStream::Ledger,
                at(10, 0),
                at(12, 999_999),
                vec![row(11, 1), row(12, 0)],
            ),
        );
        assert_eq!(hub.dispatched().cursor, at(12, 999_999).cursor);
        // A successor's republish from an older cursor, reaching further.
        apply(
            &hub,
            &stats,
            part(
                BusStream::Ledger,
                at(10, 0),
                at(14, 999_999),
                vec![row(11, 1), row(12, 0), row(13, 2)],
            ),
        );
        assert_eq!(hub.dispatched().cursor, at(14, 999_999).cursor);
        assert_eq!(stats.overlap.load(Ordering::Relaxed), 2);
        assert_eq!(stats.trades.load(Ordering::Relaxed), 3);
        assert_eq!(stats.repairs.load(Ordering::Relaxed), 0);
        // A part wholly behind the hub moves nothing back.
        apply(
            &hub,
            &stats,
            part(
                BusStream::Ledger,
                at(10, 0),
                at(11, 999_999),
                vec![row(11, 1)],
            ),
        );
        assert_eq!(hub.dispatched().cursor, at(14, 999_999).cursor);
    }

    #[test]
    fn a_part_past_the_hub_is_repaired_not_skipped_silently() {
        let hub = Hub::new(at(10, 0));
        let stats = FeedStats::default();
        apply(
            &hub,
            &stats,
            part(
                BusStream::Ledger,
                at(20, 0),
                at(21, 999_999),
                vec![row(21, 0)],
            ),
        );
        assert_eq!(stats.repairs.load(Ordering::Relaxed), 1);
        assert_eq!(hub.dispatched().cursor, at(21, 999_999).cursor);
    }

    #[test]
    fn a_final_part_moves_only_the_final_stream() {
        let hub = Hub::new(at(10, 0));
        hub.start_finals(at(5, 0));
        let stats = FeedStats::default();
        apply(
            &hub,
            &stats,
            part(BusStream::Final, at(5, 0), at(8, 999_999), vec![row(6, 0)]),
        );
        assert_eq!(hub.final_dispatched().cursor, at(8, 999_999).cursor);
        assert_eq!(hub.dispatched().cursor, at(10, 0).cursor);
        assert_eq!(stats.repairs.load(Ordering::Relaxed), 0);
    }
}
