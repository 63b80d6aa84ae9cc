//! What a live WebSocket session has sent, and what each live frame adds to its output: pure
//! state, no socket. A trade (or a `final`-only session's `final`) goes out once and in order, a
//! small `final` after its trade, a retract only of a trade the client may hold; a rewind moves
//! the session back so the new branch comes again, without repeating what it already sent.
//! A `pending` goes out once, and never after its `trade` or `void` ([`PendingSeen`]).

use std::collections::{BTreeSet, HashSet, VecDeque};

use axum::extract::ws::Utf8Bytes;
use pmw_core::message::Kind;
use pmw_core::{Cursor, Position};

use crate::hub::Frame;

/// Blocks of sent trades remembered against duplicates after a rewind (beyond any reorg depth).
pub(super) const RECENT_BLOCKS: u64 = 256;

/// What a session has sent: where it stands in the ledger and what the client may hold.
pub(super) struct Sent {
    /// Trades after this are sent; a reorg moves it back to the common ancestor.
    pub last: Cursor,
    /// The resume point to report: `last` with its block's hash.
    pub position: Position,
    /// The highest cursor the client may hold: a `retract` above it is not the client's.
    pub held: Cursor,
    /// Trades sent on this connection (cursor and block hash prefix), so a new-branch trade the
    /// replay already sent is not sent twice after a rewind. Bounded to the recent blocks.
    recent: BTreeSet<(Cursor, Option<[u8; 4]>)>,
}

impl Sent {
    pub fn new(at: Position, held: Cursor) -> Sent {
        Sent {
            last: at.cursor,
            position: at,
            held,
            recent: Default::default(),
        }
    }

    pub fn trade(&mut self, at: Position) {
        self.last = at.cursor;
        self.position = at;
        self.held = self.held.max(at.cursor);
        self.recent.insert((at.cursor, at.hash));
        let floor = at.cursor.block.saturating_sub(RECENT_BLOCKS);
        while self.recent.first().is_some_and(|(c, _)| c.block < floor) {
            self.recent.pop_first();
        }
    }
}

/// Pending ids remembered per set (the newest; far more than are ever open at once).
const PENDING_KEPT: usize = 4_096;

/// The pending fills a session sent, and those it knows ended (its `trade` or `void` sent): a
/// `pending` goes out once, and never after its end.
#[derive(Default)]
pub(super) struct PendingSeen {
    sent: Kept,
    ended: Kept,
}

/// A bounded set of ids: the newest [`PENDING_KEPT`].
#[derive(Default)]
struct Kept {
    set: HashSet<i64>,
    order: VecDeque<i64>,
}

impl Kept {
    /// Whether `id` is new.
    fn insert(&mut self, id: i64) -> bool {
        let new = self.set.insert(id);
        if new {
            self.order.push_back(id);
            if self.order.len() > PENDING_KEPT {
                let old = self.order.pop_front().expect("over the bound");
                self.set.remove(&old);
            }
        }
        new
    }
}

impl PendingSeen {
    /// Whether a `pending` of `id` may go out now (not sent, not ended); it counts as sent.
    pub fn send(&mut self, id: i64) -> bool {
        if self.ended.set.contains(&id) || self.sent.set.contains(&id) {
            return false;
        }
        self.sent.insert(id);
        true
    }

    /// `id`'s `trade` or `void` goes out: its `pending` may not any more. Whether `id` had
    /// not ended yet (a `void` goes out once).
    pub fn end(&mut self, id: i64) -> bool {
        self.ended.insert(id)
    }
}

/// A live session's state.
pub(super) struct At {
    pub final_only: bool,
    pub sent: Sent,
    /// A `trade,final` session's last `final`.
    pub finals: Option<Cursor>,
    pub pending: PendingSeen,
}

/// A frame written: its channel (`ws`, `ws_final`, or `ws_pending` for a `pending`, detected at
/// its first sighting in a pool), cursor, detect time, audit flag and pending fill (a `pending`'s,
/// or the one a trade confirmed), for the latency row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Written {
    pub channel: &'static str,
    pub cursor: Cursor,
    pub t_detect_ms: i64,
    pub audit: bool,
    pub pending_id: Option<i64>,
}

impl At {
    /// What one live frame adds to `out` (stamped at `now`), and the latency row it owes: a
    /// trade (or a `final`-only session's `final`) not sent yet, a small `final` after its
    /// trade, a `pending` sent (`ws_pending`: the dashboard's seen-pending → pushed), a retract
    /// of a trade the client may hold (no row), a `void` (no row), nothing for a rewind (it moves
    /// the session back instead).
    pub fn frame(&mut self, frame: Frame, now: i64, out: &mut Vec<Utf8Bytes>) -> Option<Written> {
        let sent = &mut self.sent;
        let item = match frame {
            Frame::Rewind(to) => {
                // A reorg: the new branch after the common ancestor comes again.
                if to.cursor < sent.last {
                    sent.last = to.cursor;
                    sent.position = to;
                }
                return None;
            }
            Frame::Item(item) => item,
        };
        match (item.kind, item.pending_id) {
            (Kind::Pending, Some(id)) => {
                if !self.pending.send(id) {
                    return None;
                }
                out.push(item.stamped_at(now));
                // Its own stage: first sighting in a pool → pushed, never the ledger's.
                return Some(Written {
                    channel: "ws_pending",
                    cursor: item.cursor,
                    t_detect_ms: item.t_detect_ms,
                    audit: false,
                    pending_id: Some(id),
                });
            }
            (Kind::Void, Some(id)) => {
                if self.pending.end(id) {
                    out.push(item.stamped_at(now));
                }
                return None;
            }
            (Kind::Trade, Some(id)) => {
                self.pending.end(id);
            }
            _ => {}
        }
        let channel = match item.kind {
            Kind::Trade => "ws",
            _ => "ws_final",
        };
        // In the session's own ledger: its trades, or a `final`-only session's finals.
        let ledger = item.kind == Kind::Trade || (item.kind == Kind::Final && self.final_only);
        match item.kind {
            Kind::Retract => {
                if item.cursor <= sent.held {
                    out.push(item.stamped_at(now));
                    sent.recent.remove(&(item.cursor, item.position.hash));
                }
                return None; // never sent to this client, or sent: no latency row either way
            }
            _ if ledger => {
                let key = (item.cursor, item.position.hash);
                if item.cursor <= sent.last || sent.recent.contains(&key) {
                    return None; // already sent (replay seam, or replayed after a rewind)
                }
                out.push(item.stamped_at(now));
                sent.trade(item.position);
            }
            _ => {
                // A small `final` for a `trade,final` session, once.
                let fin = self.finals.as_mut().filter(|f| item.cursor > **f)?;
                out.push(item.brief_stamped_at(now));
                *fin = item.cursor;
            }
        }
        Some(Written {
            channel,
            cursor: item.cursor,
            t_detect_ms: item.t_detect_ms,
            audit: item.audit,
            pending_id: item.pending_id.filter(|_| item.kind == Kind::Trade),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pmw_core::filter::Side;

    use super::*;
    use crate::hub::Item;

    fn item(kind: Kind, block: u64, log_index: u32, hash: u8) -> Frame {
        let at = Position {
            cursor: Cursor { block, log_index },
            hash: Some([hash; 4]),
        };
        Frame::Item(Arc::new(Item {
            t_detect_ms: 1_000 + block as i64,
            body: format!(r#"{{"block":{block},"log":{log_index}}}"#),
            brief: (kind == Kind::Final).then(|| format!(r#"{{"brief":{block}}}"#)),
            ..Item::test(kind, "0x01", at, Side::Buy)
        }))
    }

    fn at(block: u64, finals: Option<Cursor>) -> At {
        let pos = Position {
            cursor: Cursor {
                block,
                log_index: 0,
            },
            hash: None,
        };
        At {
            final_only: false,
            sent: Sent::new(pos, pos.cursor),
            finals,
            pending: PendingSeen::default(),
        }
    }

    #[test]
    fn a_trade_goes_out_once_and_nothing_at_or_below_the_seam() {
        let mut a = at(10, None);
        let mut out = Vec::new();
        assert_eq!(a.frame(item(Kind::Trade, 10, 0, 1), 5, &mut out), None);
        let w = a.frame(item(Kind::Trade, 11, 2, 1), 5, &mut out);
        assert_eq!(w.map(|w| (w.channel, w.cursor.block)), Some(("ws", 11)));
        assert_eq!(a.frame(item(Kind::Trade, 11, 2, 1), 6, &mut out), None);
        assert_eq!(out.len(), 1);
        assert!(out[0].starts_with(r#"{"type":"trade","t_push_ms":5,"block":11"#));
        assert_eq!(a.sent.last.block, 11);
    }

    #[test]
    fn a_rewind_resends_the_new_branch_but_not_what_was_sent_on_it() {
        let mut a = at(10, None);
        let mut out = Vec::new();
        a.frame(item(Kind::Trade, 11, 0, 1), 1, &mut out);
        a.frame(item(Kind::Trade, 12, 0, 1), 1, &mut out);
        let ancestor = Position {
            cursor: Cursor {
                block: 10,
                log_index: u32::MAX,
            },
            hash: None,
        };
        assert_eq!(a.frame(Frame::Rewind(ancestor), 2, &mut out), None);
        assert_eq!(a.sent.last.block, 10);
        // Block 11 kept its hash (same trade): not again; block 12 has a new hash: sent.
        assert_eq!(a.frame(item(Kind::Trade, 11, 0, 1), 3, &mut out), None);
        assert!(a.frame(item(Kind::Trade, 12, 0, 2), 3, &mut out).is_some());
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_retract_reaches_only_a_client_that_may_hold_its_trade() {
        let mut a = at(10, None);
        let mut out = Vec::new();
        a.frame(item(Kind::Trade, 11, 0, 1), 1, &mut out);
        assert_eq!(a.frame(item(Kind::Retract, 11, 0, 1), 2, &mut out), None);
        assert_eq!(a.frame(item(Kind::Retract, 15, 0, 1), 2, &mut out), None);
        assert_eq!(out.len(), 2, "the retract of block 11 only: {out:?}");
        assert!(out[1].starts_with(r#"{"type":"retract""#));
    }

    #[test]
    fn a_trade_final_session_gets_each_brief_final_once_after_its_position() {
        let start = Cursor {
            block: 10,
            log_index: 0,
        };
        let mut a = at(10, Some(start));
        let mut out = Vec::new();
        let w = a.frame(item(Kind::Final, 11, 0, 1), 4, &mut out);
        assert_eq!(w.map(|w| w.channel), Some("ws_final"));
        assert_eq!(a.frame(item(Kind::Final, 11, 0, 1), 4, &mut out), None);
        assert_eq!(a.frame(item(Kind::Final, 9, 0, 1), 4, &mut out), None);
        assert_eq!(
            out.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
            vec![r#"{"type":"final","t_push_ms":4,"brief":11}"#]
        );
        // A final is not in a trade,final session's ledger: its trade position is unmoved.
        assert_eq!(a.sent.last.block, 10);
    }

    fn pending(kind: Kind, id: i64) -> Frame {
        let at = Position::default();
        Frame::Item(Arc::new(Item {
            body: format!(r#"{{"pending_id":{id}}}"#),
            pending_id: Some(id),
            ..Item::test(kind, "0x01", at, Side::Buy)
        }))
    }

    #[test]
    fn a_pending_goes_out_once_and_never_after_its_trade_or_void() {
        let mut a = at(10, None);
        let mut out = Vec::new();
        let w = a
            .frame(pending(Kind::Pending, 1), 1, &mut out)
            .expect("its latency row");
        assert_eq!((w.channel, w.pending_id), ("ws_pending", Some(1)));
        assert_eq!(
            a.frame(pending(Kind::Pending, 1), 1, &mut out),
            None,
            "once"
        );
        assert_eq!(out.len(), 1, "once: {out:?}");
        assert!(out[0].starts_with(r#"{"type":"pending","t_push_ms":1,"pending_id":1"#));
        // Its trade first: the late pending is dropped; the trade goes out as ever.
        let trade = match item(Kind::Trade, 11, 0, 1) {
            Frame::Item(i) => Frame::Item(Arc::new(Item {
                pending_id: Some(2),
                body: i.body.clone(),
                ..Item::test(Kind::Trade, "0x01", i.position, Side::Buy)
            })),
            f => f,
        };
        let w = a.frame(trade, 2, &mut out).expect("the trade's row");
        assert_eq!((w.channel, w.pending_id), ("ws", Some(2)));
        assert_eq!(a.frame(pending(Kind::Pending, 2), 3, &mut out), None);
        // A void first: the same (a void owes no latency row).
        assert_eq!(a.frame(pending(Kind::Void, 3), 4, &mut out), None);
        assert_eq!(a.frame(pending(Kind::Pending, 3), 5, &mut out), None);
        a.frame(pending(Kind::Void, 3), 6, &mut out); // once
        let kinds: Vec<&str> = out.iter().map(|f| &f[9..13]).collect();
        assert_eq!(kinds, vec!["pend", "trad", "void"], "{out:?}");
        assert_eq!(a.sent.last.block, 11, "pendings move no position");
    }

    #[test]
    fn a_session_without_finals_gets_no_final() {
        let mut a = at(10, None);
        let mut out = Vec::new();
        assert_eq!(a.frame(item(Kind::Final, 11, 0, 1), 4, &mut out), None);
        assert!(out.is_empty());
    }
}
