//! The session hub: live WebSocket sessions by account, fan-out of each round's trades into their
//! bounded queues in ledger order, and the dispatched cursor that makes resume seamless (a session
//! registered at cursor P receives live every trade after P; replay covers up to P).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pmw_core::Cursor;
use tokio::sync::mpsc;

/// A trade or retraction ready for any session: body rendered once.
#[derive(Debug)]
pub struct Item {
    pub kind: &'static str,
    pub cursor: Cursor,
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
    tx: mpsc::Sender<Frame>,
    close: CloseCode,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<u64, Session>,
    by_account: HashMap<i64, Vec<u64>>,
    dispatched: Cursor,
    head: u64,
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

impl Hub {
    pub fn new(dispatched: Cursor) -> Hub {
        let hub = Hub::default();
        hub.inner.lock().expect("hub lock").dispatched = dispatched;
        hub
    }

    /// Register a session; returns its id and the cursor up to which trades were already
    /// dispatched (everything after it will be queued to this session).
    pub fn register(
        &self,
        account_id: i64,
        tx: mpsc::Sender<Frame>,
        close: CloseCode,
    ) -> (u64, Cursor) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.inner.lock().expect("hub lock");
        inner.sessions.insert(
            id,
            Session {
                account_id,
                tx,
                close,
            },
        );
        inner.by_account.entry(account_id).or_default().push(id);
        (id, inner.dispatched)
    }

    pub fn unregister(&self, id: u64) {
        let mut inner = self.inner.lock().expect("hub lock");
        if let Some(s) = inner.sessions.remove(&id) {
            if let Some(v) = inner.by_account.get_mut(&s.account_id) {
                v.retain(|x| *x != id);
                if v.is_empty() {
                    inner.by_account.remove(&s.account_id);
                }
            }
        }
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

    /// Queue each account's items (already in ledger order) to its sessions, then move the
    /// dispatched cursor. A full queue closes that session (slow consumer, 1013); others are
    /// never slowed.
    pub fn dispatch(&self, per_account: &HashMap<i64, Vec<Arc<Item>>>, through: Cursor) {
        let mut inner = self.inner.lock().expect("hub lock");
        let mut slow = Vec::new();
        for (account, items) in per_account {
            let Some(ids) = inner.by_account.get(account) else {
                continue;
            };
            for id in ids {
                let s = &inner.sessions[id];
                for item in items {
                    match s.tx.try_send(item.clone()) {
                        Ok(()) => {
                            self.stats.frames_queued.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            slow.push(*id);
                            break;
                        }
                    }
                }
            }
        }
        inner.dispatched = inner.dispatched.max(through);
        for id in slow {
            if let Some(s) = inner.sessions.remove(&id) {
                self.stats.slow_closed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(session = id, account = s.account_id, "slow consumer closed");
                // Dropping the sender ends the writer, which closes with 1013.
                if let Some(v) = inner.by_account.get_mut(&s.account_id) {
                    v.retain(|x| *x != id);
                }
            }
        }
        inner.by_account.retain(|_, v| !v.is_empty());
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
    }
}
