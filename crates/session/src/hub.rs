//! The session hub: live WebSocket sessions with the wallets each follows, fan-out of each
//! round's items into their bounded queues in ledger order, and the dispatched cursor that makes
//! resume seamless (a session registered at cursor P receives live every trade after P of the
//! wallets it follows; replay covers up to P).
//!
//! After a reorg the hub sends every session a [`Frame::Rewind`] to the common ancestor before
//! the round's retracts and new-branch trades, so a session re-sends the new branch from there.
//!
//! Two streams run through the hub: the ledger (`trade`s and `retract`s, from the WebSocket lane)
//! and the finalized ledger (`final`s, from the finality lane, never ahead of the ledger's
//! dispatched position). Each shard keeps a dispatched position per stream; a session receives
//! the streams its [`Events`] ask for.
//!
//! A session's wallet set is read from Postgres when it connects, with the `subs_version` it was
//! read at, and replaced only by an index at least that new: a round still using an older index
//! can never drop a trade of a wallet the session already follows. The wallets' filters travel
//! with them (same version) and are applied where the session is chosen, under the shard lock
//! ([`crate::subs::wants`]), to trades and retracts alike.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pmw_core::message::{Events, Kind};
use pmw_core::{Cursor, Position};
use tokio::sync::mpsc;

use crate::subs::{Filters, Index, MarketFilters};
use session::{Session, Via};

/// A trade or retraction ready for any session: body rendered once.
#[derive(Debug)]
pub struct Item {
    pub kind: Kind,
    pub cursor: Cursor,
    /// `cursor` with its block's hash: what the client resumes with after this frame.
    pub position: Position,
    /// Lowercase `0x…` owner of the fill (its maker): who follows it gets it.
    pub wallet: String,
    /// What subscription filters look at (from the same row and market as `body`).
    pub facts: pmw_core::filter::Facts,
    pub t_detect_ms: i64,
    /// Found by pmw-live's completeness audit, not seen live: its delivery is no live latency.
    pub audit: bool,
    pub body: String,
    /// A `final`'s small body ([`pmw_core::message::FinalNotice`]) for sessions that also get
    /// `trade`s; `body` is the full one, for `final`-only sessions.
    pub brief: Option<String>,
    /// The pending fill a `trade` confirms, or a `pending`'s or `void`'s own (their `cursor` and
    /// `position` are the default: the pending lane takes no ledger position).
    pub pending_id: Option<i64>,
    /// Its frames as last stamped, shared by the sessions writing it in the same millisecond.
    pub stamped: crate::stamped::Stamped,
}

impl Item {
    /// The item of a `kind` message about `row`: its facts from `row` and `market` (the same
    /// that rendered `body`), and the small body of a `final`, if any.
    pub fn of_row(
        kind: Kind,
        row: &pmw_core::ch::TradeRow,
        market: Option<&pmw_core::message::Market>,
        body: String,
        brief: Option<String>,
    ) -> Item {
        Item {
            kind,
            cursor: row.cursor(),
            position: Position::of(row.cursor(), &row.block_hash),
            wallet: row.maker.clone(),
            facts: pmw_core::filter::Facts::of_row(row, market),
            t_detect_ms: row.t_detect_ms,
            audit: row.audit == 1,
            body,
            brief,
            pending_id: None,
            stamped: Default::default(),
        }
    }
}

/// Which stream a round feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// `trade`s and `retract`s, as ingested.
    Ledger,
    /// `final`s (and, for `final`-only sessions, the rare `retract` of an audit correction).
    Final,
    /// `pending`s and `void`s: no position of their own, no rewind ([`Hub::dispatch_pending`]).
    Pending,
}

impl Stream {
    fn wants(self, events: Events, kind: Kind) -> bool {
        match (self, kind) {
            (Stream::Ledger, _) => events.trade,
            (Stream::Final, Kind::Final) => events.fin,
            (Stream::Final, _) => events.final_only(),
            (Stream::Pending, _) => events.pending,
        }
    }

    /// Whether a rewind of this stream concerns a session.
    fn rewinds(self, events: Events) -> bool {
        match self {
            Stream::Ledger => events.trade,
            Stream::Final => events.final_only(),
            Stream::Pending => false,
        }
    }
}

/// What a session's writer receives. When the hub drops the sender, the writer sends what is
/// queued and closes with the session's close code (1013 slow consumer unless set otherwise).
#[derive(Debug, Clone)]
pub enum Frame {
    Item(Arc<Item>),
    /// A reorg: the ledger after this position (the common ancestor) is sent again.
    Rewind(Position),
}

/// Close code of a session the hub let go: 1013 (try again later) by default.
pub type CloseCode = Arc<std::sync::atomic::AtomicU16>;

#[derive(Default)]
struct Inner {
    sessions: HashMap<u64, Session>,
    by_wallet: HashMap<String, Vec<u64>>,
    /// Sessions by an outcome token of a market they follow.
    by_token: HashMap<String, Vec<u64>>,
    /// Sessions by a wallet they stopped following (retracts only).
    by_former: HashMap<String, Vec<u64>>,
    /// Sessions by a market token they stopped following (retracts only).
    by_former_token: HashMap<String, Vec<u64>>,
    by_account: HashMap<i64, Vec<u64>>,
    /// What this shard's sessions were given up to: a session registering here replays up to it.
    dispatched: Position,
    /// The same for the `final` stream (never ahead of `dispatched`).
    final_dispatched: Position,
}

impl Inner {
    fn link(&mut self, id: u64) {
        let s = &self.sessions[&id];
        for w in &s.wallets {
            self.by_wallet.entry(w.clone()).or_default().push(id);
        }
        for t in s.markets.keys() {
            self.by_token.entry(t.clone()).or_default().push(id);
        }
        for (w, _) in &s.former {
            self.by_former.entry(w.clone()).or_default().push(id);
        }
        for t in s.former_markets.keys() {
            self.by_former_token.entry(t.clone()).or_default().push(id);
        }
        self.by_account.entry(s.account_id).or_default().push(id);
    }

    fn unlink(&mut self, id: u64) -> Option<Session> {
        let s = self.sessions.remove(&id)?;
        for w in &s.wallets {
            drop_id(&mut self.by_wallet, w, id);
        }
        for t in s.markets.keys() {
            drop_id(&mut self.by_token, t, id);
        }
        for (w, _) in &s.former {
            drop_id(&mut self.by_former, w, id);
        }
        for t in s.former_markets.keys() {
            drop_id(&mut self.by_former_token, t, id);
        }
        drop_id(&mut self.by_account, &s.account_id, id);
        Some(s)
    }

    /// Queue `items` to this shard's followers of each item's wallet or market (once each),
    /// then move the shard's dispatched position. A full queue closes that session (slow
    /// consumer). Returns the frames queued and the sessions closed.
    fn dispatch(
        &mut self,
        items: &[Arc<Item>],
        through: Position,
        stream: Stream,
    ) -> (usize, usize) {
        let mut slow: Vec<u64> = Vec::new();
        let mut queued = 0;
        for item in items {
            // The followers of the item's wallet, then of its market, and for a retract those
            // that stopped following either: each session is decided once, where it is first
            // reached ([`Session::wants`]).
            let retract = item.kind == Kind::Retract;
            let token = &item.facts.token_id;
            let lists = [
                (ids_of(&self.by_wallet, &item.wallet, true), Via::Wallet),
                (
                    ids_of(&self.by_former, &item.wallet, retract),
                    Via::FormerWallet,
                ),
                (ids_of(&self.by_token, token, true), Via::Market),
                (
                    ids_of(&self.by_former_token, token, retract),
                    Via::FormerMarket,
                ),
            ];
            for (id, via) in lists
                .iter()
                .flat_map(|(ids, via)| ids.iter().map(move |i| (i, *via)))
            {
                let s = &self.sessions[id];
                if slow.contains(id)
                    || !stream.wants(s.events, item.kind)
                    || s.reached_before(item, via)
                    || !s.wants(item)
                {
                    continue;
                }
                match s.tx.try_send(Frame::Item(item.clone())) {
                    Ok(()) => queued += 1,
                    Err(_) => slow.push(*id),
                }
            }
        }
        let at = match stream {
            Stream::Ledger => Some(&mut self.dispatched),
            Stream::Final => Some(&mut self.final_dispatched),
            Stream::Pending => None,
        };
        if let Some(at) = at.filter(|at| through.cursor > at.cursor) {
            *at = through;
        }
        let mut closed = 0;
        for id in slow {
            if let Some(s) = self.unlink(id) {
                closed += 1;
                // Dropping the sender ends the writer, which closes with 1013.
                tracing::info!(session = id, account = s.account_id, "slow consumer closed");
            }
        }
        (queued, closed)
    }
}

/// The sessions `m` lists under `k` (none unless `on`).
fn ids_of<'a>(m: &'a HashMap<String, Vec<u64>>, k: &str, on: bool) -> &'a [u64] {
    m.get(k).filter(|_| on).map_or(&[], Vec::as_slice)
}

fn drop_id<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, Vec<u64>>, key: &K, id: u64) {
    if let Some(v) = map.get_mut(key) {
        v.retain(|x| *x != id);
        if v.is_empty() {
            map.remove(key);
        }
    }
}

/// Counters for health and tests.
#[derive(Debug, Default)]
pub struct HubStats {
    pub frames_queued: AtomicU64,
    pub slow_closed: AtomicU64,
}

/// Shards of the session set: an account's sessions all live in one (its plan's session limit
/// is checked there), and no lock is held across shards, so sessions connecting, closing or
/// being re-indexed in one shard never wait for a round's fan-out to another.
pub const SHARDS: usize = 16;

#[derive(Clone)]
pub struct Hub {
    shards: Arc<[Mutex<Inner>]>,
    head: Arc<AtomicU64>,
    /// When the view of keys and subscriptions was last confirmed current ([`view`]).
    viewed_ms: Arc<std::sync::atomic::AtomicI64>,
    next_id: Arc<AtomicU64>,
    pub stats: Arc<HubStats>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::new(Position::default())
    }
}

/// Refused: the account already has its plan's number of sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany(pub u32);

/// A session as it registers: its account and key, the wallets it follows and their version,
/// and its plan's limit of concurrent sessions.
pub struct Registration {
    pub account_id: i64,
    pub key_id: i64,
    pub max_sessions: Option<u32>,
    pub wallets: Vec<String>,
    pub filters: Filters,
    pub markets: MarketFilters,
    pub version: i64,
    pub events: Events,
    pub tx: mpsc::Sender<Frame>,
    pub close: CloseCode,
}

/// Where a registered session's live frames start, per stream: it replays up to these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    pub id: u64,
    pub dispatched: Position,
    pub final_dispatched: Position,
}

impl Hub {
    pub fn new(dispatched: Position) -> Hub {
        let shards: Vec<Mutex<Inner>> = (0..SHARDS)
            .map(|_| {
                Mutex::new(Inner {
                    dispatched,
                    final_dispatched: dispatched,
                    ..Inner::default()
                })
            })
            .collect();
        Hub {
            shards: shards.into(),
            head: Arc::default(),
            viewed_ms: Arc::new(pmw_core::UnixMs::now().0.into()),
            next_id: Arc::default(),
            stats: Arc::default(),
        }
    }

    fn shard(&self, account_id: i64) -> std::sync::MutexGuard<'_, Inner> {
        let i = account_id.rem_euclid(SHARDS as i64) as usize;
        self.shards[i].lock().expect("hub lock")
    }

    fn each(&self) -> impl Iterator<Item = std::sync::MutexGuard<'_, Inner>> {
        self.shards.iter().map(|s| s.lock().expect("hub lock"))
    }

    /// Register a session; returns its id and the positions up to which each stream was
    /// already dispatched to its shard (everything after them, of the session's wallets, will be
    /// queued to it), or the account's limit when it already has that many sessions.
    pub fn register(&self, r: Registration) -> Result<Registered, TooMany> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.shard(r.account_id);
        if let Some(max) = r.max_sessions {
            let open = inner.by_account.get(&r.account_id).map_or(0, Vec::len);
            if open >= max as usize {
                return Err(TooMany(max));
            }
        }
        inner.sessions.insert(
            id,
            Session {
                account_id: r.account_id,
                key_id: r.key_id,
                wallets: r.wallets,
                filters: r.filters,
                markets: r.markets,
                version: r.version,
                former: Vec::new(),
                former_markets: MarketFilters::new(),
                events: r.events,
                tx: r.tx,
                close: r.close,
            },
        );
        inner.link(id);
        Ok(Registered {
            id,
            dispatched: inner.dispatched,
            final_dispatched: inner.final_dispatched,
        })
    }

    pub fn unregister(&self, id: u64) {
        for mut inner in self.each() {
            if inner.unlink(id).is_some() {
                return;
            }
        }
    }

    /// Give every session the wallets `idx` says its account follows, unless the session's own
    /// set is newer than `idx`; close (1008) the sessions whose key `idx` no longer lists
    /// (revoked, or the account disabled). Returns how many were closed.
    pub fn apply(&self, idx: &Index) -> usize {
        self.viewed();
        let mut revoked = 0;
        let none = Vec::new();
        let no_filters = Filters::new();
        let no_markets = MarketFilters::new();
        for mut inner in self.each() {
            let stale: Vec<u64> = inner
                .sessions
                .iter()
                .filter(|(_, s)| s.version < idx.version)
                .map(|(id, _)| *id)
                .collect();
            for id in stale {
                let s = inner.sessions.get_mut(&id).expect("listed above");
                let wallets = idx.wallets_by_account.get(&s.account_id).unwrap_or(&none);
                let filters = idx
                    .filters_by_account
                    .get(&s.account_id)
                    .unwrap_or(&no_filters);
                let markets = idx
                    .markets_by_account
                    .get(&s.account_id)
                    .unwrap_or(&no_markets);
                let same_tokens = markets.len() == s.markets.len()
                    && markets.keys().all(|t| s.markets.contains_key(t));
                if idx.live_keys.contains(&s.key_id) && *wallets == s.wallets && same_tokens {
                    // Same wallets and markets: no relinking, only the filters may have changed.
                    s.filters.clone_from(filters);
                    s.markets.clone_from(markets);
                    s.version = idx.version; // unchanged: no relinking
                    continue;
                }
                let Some(mut s) = inner.unlink(id) else {
                    continue;
                };
                if !idx.live_keys.contains(&s.key_id) {
                    // Dropping the sender ends the writer, which closes with this code.
                    s.close.store(1008, Ordering::SeqCst);
                    revoked += 1;
                    tracing::info!(
                        session = id,
                        account = s.account_id,
                        key = s.key_id,
                        "session closed: key revoked or account disabled"
                    );
                    continue;
                }
                let wallets = idx
                    .wallets_by_account
                    .get(&s.account_id)
                    .cloned()
                    .unwrap_or_default();
                let markets = idx
                    .markets_by_account
                    .get(&s.account_id)
                    .cloned()
                    .unwrap_or_default();
                s.remember_former(&wallets, &markets);
                s.wallets = wallets;
                s.filters = idx
                    .filters_by_account
                    .get(&s.account_id)
                    .cloned()
                    .unwrap_or_default();
                s.markets = markets;
                s.version = idx.version;
                inner.sessions.insert(id, s);
                inner.link(id);
            }
        }
        revoked
    }

    /// Whether any session follows `wallet`.
    pub fn follows(&self, wallet: &str) -> bool {
        self.each()
            .any(|inner| inner.by_wallet.contains_key(wallet))
    }

    pub fn sessions(&self) -> usize {
        self.each().map(|inner| inner.sessions.len()).sum()
    }

    pub fn sessions_of(&self, account_id: i64) -> usize {
        self.shard(account_id)
            .by_account
            .get(&account_id)
            .map_or(0, Vec::len)
    }

    /// The last ingest watermark seen (heartbeats carry it).
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Relaxed)
    }

    pub fn set_head(&self, head: u64) {
        self.head.store(head, Ordering::Relaxed);
    }

    /// The lowest position dispatched to any shard.
    pub fn dispatched(&self) -> Position {
        self.each()
            .map(|inner| inner.dispatched)
            .min_by_key(|p| p.cursor)
            .unwrap_or_default()
    }

    /// The lowest `final` stream position dispatched to any shard.
    pub fn final_dispatched(&self) -> Position {
        self.each()
            .map(|inner| inner.final_dispatched)
            .min_by_key(|p| p.cursor)
            .unwrap_or_default()
    }

    /// Set where the `final` stream stands (the finality lane's cursor, at its start).
    pub fn start_finals(&self, at: Position) {
        for mut inner in self.each() {
            inner.final_dispatched = at;
        }
    }

    /// Queue `items` (in ledger order) to the sessions following each item's wallet, shard by
    /// shard, then move each shard's dispatched cursor. A full queue closes that session (slow
    /// consumer, 1013); others are never slowed. Returns the number of frames queued.
    pub fn dispatch(&self, items: &[Arc<Item>], through: Position) -> usize {
        self.dispatch_stream(items, through, Stream::Ledger)
    }

    /// Queue the pending lane's `pending`s and `void`s to the sessions that opted in, as
    /// [`Hub::dispatch`] queues trades (same filters, same slow-consumer rule), moving no
    /// position: a session's writer drops a `pending` whose `trade` or `void` it already sent.
    pub fn dispatch_pending(&self, items: &[Arc<Item>]) -> usize {
        self.dispatch_stream(items, Position::default(), Stream::Pending)
    }

    /// [`Hub::dispatch`] for any stream.
    pub fn dispatch_stream(&self, items: &[Arc<Item>], through: Position, stream: Stream) -> usize {
        let (mut queued, mut closed) = (0, 0);
        for mut inner in self.each() {
            let (q, c) = inner.dispatch(items, through, stream);
            queued += q;
            closed += c;
        }
        self.stats
            .frames_queued
            .fetch_add(queued as u64, Ordering::Relaxed);
        self.stats
            .slow_closed
            .fetch_add(closed as u64, Ordering::Relaxed);
        queued
    }

    /// Rewind the dispatched position after a reorg (the new branch is dispatched again) and
    /// tell every session, ahead of the round's retracts and new-branch trades. A session whose
    /// queue is full is closed (slow consumer); it resumes with its position.
    pub fn rewind(&self, to: Position, stream: Stream) {
        for mut inner in self.each() {
            let at = match stream {
                Stream::Ledger => &mut inner.dispatched,
                Stream::Final => &mut inner.final_dispatched,
                Stream::Pending => return,
            };
            if to.cursor < at.cursor {
                *at = to;
            }
            let slow: Vec<u64> = inner
                .sessions
                .iter()
                .filter(|(_, s)| {
                    stream.rewinds(s.events) && s.tx.try_send(Frame::Rewind(to)).is_err()
                })
                .map(|(id, _)| *id)
                .collect();
            for id in slow {
                if inner.unlink(id).is_some() {
                    self.stats.slow_closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Close every session with `code` (1012 on restart) and forget them.
    pub fn close_all(&self, code: u16) {
        for mut inner in self.each() {
            for (_, s) in inner.sessions.drain() {
                s.close.store(code, Ordering::SeqCst);
            }
            inner.by_account.clear();
            inner.by_wallet.clear();
            inner.by_token.clear();
            inner.by_former.clear();
            inner.by_former_token.clear();
        }
    }
}

mod session;
#[cfg(test)]
mod tests;
pub mod view;
