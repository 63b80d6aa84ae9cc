//! The session hub: live WebSocket sessions with the wallets each follows, fan-out of each
//! round's items into their bounded queues in ledger order, and the dispatched cursor that makes
//! resume seamless (a session registered at cursor P receives live every trade after P of the
//! wallets it follows; replay covers up to P).
//!
//! After a reorg the hub sends every session a [`Frame::Rewind`] to the common ancestor before
//! the round's retracts and new-branch trades, so a session re-sends the new branch from there.
//!
//! A session's wallet set is read from Postgres when it connects, with the `subs_version` it was
//! read at, and replaced only by an index at least that new: a round still using an older index
//! can never drop a trade of a wallet the session already follows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pmw_core::message::Kind;
use pmw_core::{Cursor, Position};
use tokio::sync::mpsc;

use crate::subs::Index;

/// A trade or retraction ready for any session: body rendered once.
#[derive(Debug)]
pub struct Item {
    pub kind: Kind,
    pub cursor: Cursor,
    /// `cursor` with its block's hash: what the client resumes with after this frame.
    pub position: Position,
    /// Lowercase `0x…` owner of the fill (its maker): who follows it gets it.
    pub wallet: String,
    pub t_detect_ms: i64,
    /// Found by pmw-live's completeness audit, not seen live: its delivery is no live latency.
    pub audit: bool,
    pub body: String,
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

struct Session {
    account_id: i64,
    key_id: i64,
    wallets: Vec<String>,
    /// `subs_version` of `wallets`.
    version: i64,
    tx: mpsc::Sender<Frame>,
    close: CloseCode,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<u64, Session>,
    by_wallet: HashMap<String, Vec<u64>>,
    by_account: HashMap<i64, Vec<u64>>,
    /// What this shard's sessions were given up to: a session registering here replays up to it.
    dispatched: Position,
}

impl Inner {
    fn link(&mut self, id: u64) {
        let s = &self.sessions[&id];
        for w in &s.wallets {
            self.by_wallet.entry(w.clone()).or_default().push(id);
        }
        self.by_account.entry(s.account_id).or_default().push(id);
    }

    fn unlink(&mut self, id: u64) -> Option<Session> {
        let s = self.sessions.remove(&id)?;
        for w in &s.wallets {
            drop_id(&mut self.by_wallet, w, id);
        }
        drop_id(&mut self.by_account, &s.account_id, id);
        Some(s)
    }

    /// Queue `items` to this shard's followers of each item's wallet, then move the shard's
    /// dispatched position. A full queue closes that session (slow consumer). Returns the
    /// frames queued and the sessions closed.
    fn dispatch(&mut self, items: &[Arc<Item>], through: Position) -> (usize, usize) {
        let mut slow: Vec<u64> = Vec::new();
        let mut queued = 0;
        for item in items {
            let Some(ids) = self.by_wallet.get(&item.wallet) else {
                continue;
            };
            for id in ids {
                if slow.contains(id) {
                    continue;
                }
                match self.sessions[id].tx.try_send(Frame::Item(item.clone())) {
                    Ok(()) => queued += 1,
                    Err(_) => slow.push(*id),
                }
            }
        }
        if through.cursor > self.dispatched.cursor {
            self.dispatched = through;
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
    pub version: i64,
    pub tx: mpsc::Sender<Frame>,
    pub close: CloseCode,
}

impl Hub {
    pub fn new(dispatched: Position) -> Hub {
        let shards: Vec<Mutex<Inner>> = (0..SHARDS)
            .map(|_| {
                Mutex::new(Inner {
                    dispatched,
                    ..Inner::default()
                })
            })
            .collect();
        Hub {
            shards: shards.into(),
            head: Arc::default(),
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

    /// Register a session; returns its id and the cursor up to which trades were already
    /// dispatched to its shard (everything after it, of the session's wallets, will be queued
    /// to it), or the account's limit when it already has that many sessions.
    pub fn register(&self, r: Registration) -> Result<(u64, Position), TooMany> {
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
                version: r.version,
                tx: r.tx,
                close: r.close,
            },
        );
        inner.link(id);
        Ok((id, inner.dispatched))
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
        let mut revoked = 0;
        let none = Vec::new();
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
                if idx.live_keys.contains(&s.key_id) && *wallets == s.wallets {
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
                s.wallets = idx
                    .wallets_by_account
                    .get(&s.account_id)
                    .cloned()
                    .unwrap_or_default();
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

    /// Queue `items` (in ledger order) to the sessions following each item's wallet, shard by
    /// shard, then move each shard's dispatched cursor. A full queue closes that session (slow
    /// consumer, 1013); others are never slowed. Returns the number of frames queued.
    pub fn dispatch(&self, items: &[Arc<Item>], through: Position) -> usize {
        let (mut queued, mut closed) = (0, 0);
        for mut inner in self.each() {
            let (q, c) = inner.dispatch(items, through);
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
    pub fn rewind(&self, to: Position) {
        for mut inner in self.each() {
            if to.cursor < inner.dispatched.cursor {
                inner.dispatched = to;
            }
            let slow: Vec<u64> = inner
                .sessions
                .iter()
                .filter(|(_, s)| s.tx.try_send(Frame::Rewind(to)).is_err())
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU16;

    fn item(wallet: &str, log_index: u32) -> Arc<Item> {
        Arc::new(Item {
            kind: Kind::Trade,
            cursor: Cursor {
                block: 1,
                log_index,
            },
            position: Position::default(),
            wallet: wallet.into(),
            t_detect_ms: 0,
            audit: false,
            body: "{}".into(),
        })
    }

    fn register(
        hub: &Hub,
        wallets: &[&str],
        version: i64,
        max_sessions: Option<u32>,
    ) -> Result<(mpsc::Receiver<Frame>, CloseCode), TooMany> {
        let (tx, rx) = mpsc::channel(16);
        let close = Arc::new(AtomicU16::new(1013));
        hub.register(Registration {
            account_id: 7,
            key_id: 70,
            max_sessions,
            wallets: wallets.iter().map(|w| w.to_string()).collect(),
            version,
            tx,
            close: close.clone(),
        })?;
        Ok((rx, close))
    }

    fn session(hub: &Hub, wallets: &[&str], version: i64) -> mpsc::Receiver<Frame> {
        register(hub, wallets, version, None).unwrap().0
    }

    fn drain(rx: &mut mpsc::Receiver<Frame>) -> Vec<u32> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|f| match f {
                Frame::Item(i) => i.cursor.log_index,
                Frame::Rewind(p) => 1_000_000 + p.cursor.log_index,
            })
            .collect()
    }

    #[test]
    fn an_older_index_never_replaces_a_fresher_session_set() {
        let hub = Hub::new(Position::default());
        let mut rx = session(&hub, &["0xa", "0xb"], 5);
        // An index read before the session subscribed to 0xb.
        let mut old = Index {
            version: 4,
            live_keys: [70].into(),
            ..Index::default()
        };
        old.wallets_by_account.insert(7, vec!["0xa".into()]);
        hub.apply(&old);
        hub.dispatch(
            &[item("0xa", 1), item("0xb", 2), item("0xc", 3)],
            Position::default(),
        );
        assert_eq!(drain(&mut rx), vec![1, 2]);
        // A newer index that removed 0xa: the session stops getting it.
        let mut new = Index {
            version: 6,
            live_keys: [70].into(),
            ..Index::default()
        };
        new.wallets_by_account.insert(7, vec!["0xb".into()]);
        hub.apply(&new);
        hub.dispatch(&[item("0xa", 4), item("0xb", 5)], Position::default());
        assert_eq!(drain(&mut rx), vec![5]);
        // A reorg reaches every session, before the round's items.
        hub.rewind(Position::default());
        hub.dispatch(&[item("0xb", 6)], Position::default());
        assert_eq!(drain(&mut rx), vec![1_000_000, 6]);
        assert!(!hub.follows("0xa") && hub.follows("0xb"));
    }

    #[test]
    fn every_shard_gets_the_round_and_a_late_session_starts_after_it() {
        let hub = Hub::new(Position::default());
        let mut rxs = Vec::new();
        for account in 0..(3 * SHARDS as i64) {
            let (tx, rx) = mpsc::channel(4);
            hub.register(Registration {
                account_id: account,
                key_id: account,
                max_sessions: None,
                wallets: vec!["0xa".into()],
                version: 1,
                tx,
                close: Arc::new(AtomicU16::new(1013)),
            })
            .unwrap();
            rxs.push(rx);
        }
        assert_eq!(hub.sessions(), 3 * SHARDS);
        assert!(hub.follows("0xa") && !hub.follows("0xb"));
        let through = Position {
            cursor: Cursor {
                block: 1,
                log_index: 2,
            },
            hash: None,
        };
        assert_eq!(
            hub.dispatch(&[item("0xa", 2), item("0xb", 3)], through),
            3 * SHARDS
        );
        for rx in &mut rxs {
            assert_eq!(drain(rx), vec![2]);
        }
        assert_eq!(hub.dispatched(), through);
        // A session registering after the round replays up to it, in any shard.
        let (tx, _rx) = mpsc::channel(4);
        let (_, at) = hub
            .register(Registration {
                account_id: 5,
                key_id: 5,
                max_sessions: None,
                wallets: vec!["0xa".into()],
                version: 1,
                tx,
                close: Arc::new(AtomicU16::new(1013)),
            })
            .unwrap();
        assert_eq!(at, through);
    }

    #[test]
    fn the_plan_limit_refuses_one_more_session_and_a_revoked_key_closes_with_1008() {
        let hub = Hub::new(Position::default());
        let (_a, _) = register(&hub, &["0xa"], 1, Some(2)).unwrap();
        let (mut b, close_b) = register(&hub, &["0xa"], 1, Some(2)).unwrap();
        assert_eq!(register(&hub, &["0xa"], 1, Some(2)).err(), Some(TooMany(2)));
        // An index older than the sessions changes nothing, even without their key.
        assert_eq!(
            hub.apply(&Index {
                version: 1,
                ..Index::default()
            }),
            0
        );
        assert_eq!(hub.sessions_of(7), 2);
        // A newer index without the key closes both, with 1008, and frees the slots.
        assert_eq!(
            hub.apply(&Index {
                version: 2,
                ..Index::default()
            }),
            2
        );
        assert_eq!(close_b.load(Ordering::SeqCst), 1008);
        assert!(matches!(
            b.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(hub.sessions_of(7), 0);
        assert!(register(&hub, &["0xa"], 3, Some(2)).is_ok());
    }
}
