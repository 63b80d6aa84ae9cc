//! The session hub: live WebSocket sessions with the wallets each follows, fan-out of each
//! round's items into their bounded queues in ledger order, and the dispatched cursor that makes
//! resume seamless (a session registered at cursor P receives live every trade after P of the
//! wallets it follows; replay covers up to P).
//!
//! A session's wallet set is read from Postgres when it connects, with the `subs_version` it was
//! read at, and replaced only by an index at least that new: a round still using an older index
//! can never drop a trade of a wallet the session already follows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pmw_core::Cursor;
use tokio::sync::mpsc;

use crate::subs::Index;

/// A trade or retraction ready for any session: body rendered once.
#[derive(Debug)]
pub struct Item {
    pub kind: &'static str,
    pub cursor: Cursor,
    /// Lowercase `0x…` owner of the fill (its maker): who follows it gets it.
    pub wallet: String,
    pub t_detect_ms: i64,
    pub body: String,
}

/// What a session's writer receives. When the hub drops the sender, the writer sends what is
/// queued and closes with the session's close code (1013 slow consumer unless set otherwise).
pub type Frame = Arc<Item>;

/// Close code of a session the hub let go: 1013 (try again later) by default.
pub type CloseCode = Arc<std::sync::atomic::AtomicU16>;

struct Session {
    account_id: i64,
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
    dispatched: Cursor,
    head: u64,
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

#[derive(Clone, Default)]
pub struct Hub {
    inner: Arc<Mutex<Inner>>,
    next_id: Arc<AtomicU64>,
    pub stats: Arc<HubStats>,
}

/// A session as it registers: its account, the wallets it follows and their version.
pub struct Registration {
    pub account_id: i64,
    pub wallets: Vec<String>,
    pub version: i64,
    pub tx: mpsc::Sender<Frame>,
    pub close: CloseCode,
}

impl Hub {
    pub fn new(dispatched: Cursor) -> Hub {
        let hub = Hub::default();
        hub.inner.lock().expect("hub lock").dispatched = dispatched;
        hub
    }

    /// Register a session; returns its id and the cursor up to which trades were already
    /// dispatched (everything after it, of the session's wallets, will be queued to it).
    pub fn register(&self, r: Registration) -> (u64, Cursor) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.inner.lock().expect("hub lock");
        inner.sessions.insert(
            id,
            Session {
                account_id: r.account_id,
                wallets: r.wallets,
                version: r.version,
                tx: r.tx,
                close: r.close,
            },
        );
        inner.link(id);
        (id, inner.dispatched)
    }

    pub fn unregister(&self, id: u64) {
        self.inner.lock().expect("hub lock").unlink(id);
    }

    /// Give every session the wallets `idx` says its account follows, unless the session's own
    /// set is newer than `idx`.
    pub fn apply(&self, idx: &Index) {
        let mut inner = self.inner.lock().expect("hub lock");
        let stale: Vec<u64> = inner
            .sessions
            .iter()
            .filter(|(_, s)| s.version < idx.version)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            let Some(mut s) = inner.unlink(id) else {
                continue;
            };
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

    /// Whether any session follows `wallet`.
    pub fn follows(&self, wallet: &str) -> bool {
        self.inner
            .lock()
            .expect("hub lock")
            .by_wallet
            .contains_key(wallet)
    }

    pub fn sessions(&self) -> usize {
        self.inner.lock().expect("hub lock").sessions.len()
    }

    pub fn sessions_of(&self, account_id: i64) -> usize {
        self.inner
            .lock()
            .expect("hub lock")
            .by_account
            .get(&account_id)
            .map_or(0, Vec::len)
    }

    /// The last ingest watermark seen (heartbeats carry it).
    pub fn head(&self) -> u64 {
        self.inner.lock().expect("hub lock").head
    }

    pub fn set_head(&self, head: u64) {
        self.inner.lock().expect("hub lock").head = head;
    }

    pub fn dispatched(&self) -> Cursor {
        self.inner.lock().expect("hub lock").dispatched
    }

    /// Queue `items` (in ledger order) to the sessions following each item's wallet, then move
    /// the dispatched cursor. A full queue closes that session (slow consumer, 1013); others are
    /// never slowed. Returns the number of frames queued.
    pub fn dispatch(&self, items: &[Arc<Item>], through: Cursor) -> usize {
        let mut inner = self.inner.lock().expect("hub lock");
        let mut slow: Vec<u64> = Vec::new();
        let mut queued = 0;
        for item in items {
            let Some(ids) = inner.by_wallet.get(&item.wallet) else {
                continue;
            };
            for id in ids {
                if slow.contains(id) {
                    continue;
                }
                match inner.sessions[id].tx.try_send(item.clone()) {
                    Ok(()) => queued += 1,
                    Err(_) => slow.push(*id),
                }
            }
        }
        self.stats
            .frames_queued
            .fetch_add(queued as u64, Ordering::Relaxed);
        inner.dispatched = inner.dispatched.max(through);
        for id in slow {
            if let Some(s) = inner.unlink(id) {
                self.stats.slow_closed.fetch_add(1, Ordering::Relaxed);
                // Dropping the sender ends the writer, which closes with 1013.
                tracing::info!(session = id, account = s.account_id, "slow consumer closed");
            }
        }
        queued
    }

    /// Rewind the dispatched cursor after a reorg (the new branch is dispatched again).
    pub fn rewind(&self, to: Cursor) {
        let mut inner = self.inner.lock().expect("hub lock");
        inner.dispatched = inner.dispatched.min(to);
    }

    /// Close every session with `code` (1012 on restart) and forget them.
    pub fn close_all(&self, code: u16) {
        let mut inner = self.inner.lock().expect("hub lock");
        for (_, s) in inner.sessions.drain() {
            s.close.store(code, Ordering::SeqCst);
        }
        inner.by_account.clear();
        inner.by_wallet.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU16;

    fn item(wallet: &str, log_index: u32) -> Arc<Item> {
        Arc::new(Item {
            kind: "trade",
            cursor: Cursor {
                block: 1,
                log_index,
            },
            wallet: wallet.into(),
            t_detect_ms: 0,
            body: "{}".into(),
        })
    }

    fn session(hub: &Hub, wallets: &[&str], version: i64) -> mpsc::Receiver<Frame> {
        let (tx, rx) = mpsc::channel(16);
        hub.register(Registration {
            account_id: 7,
            wallets: wallets.iter().map(|w| w.to_string()).collect(),
            version,
            tx,
            close: Arc::new(AtomicU16::new(1013)),
        });
        rx
    }

    fn drain(rx: &mut mpsc::Receiver<Frame>) -> Vec<u32> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|f| f.cursor.log_index)
            .collect()
    }

    #[test]
    fn an_older_index_never_replaces_a_fresher_session_set() {
        let hub = Hub::new(Cursor::default());
        let mut rx = session(&hub, &["0xa", "0xb"], 5);
        // An index read before the session subscribed to 0xb.
        let mut old = Index {
            version: 4,
            ..Index::default()
        };
        old.wallets_by_account.insert(7, vec!["0xa".into()]);
        hub.apply(&old);
        hub.dispatch(
            &[item("0xa", 1), item("0xb", 2), item("0xc", 3)],
            Cursor::default(),
        );
        assert_eq!(drain(&mut rx), vec![1, 2]);
        // A newer index that removed 0xa: the session stops getting it.
        let mut new = Index {
            version: 6,
            ..Index::default()
        };
        new.wallets_by_account.insert(7, vec!["0xb".into()]);
        hub.apply(&new);
        hub.dispatch(&[item("0xa", 4), item("0xb", 5)], Cursor::default());
        assert_eq!(drain(&mut rx), vec![5]);
        assert!(!hub.follows("0xa") && hub.follows("0xb"));
    }
}
