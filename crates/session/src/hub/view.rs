//! The age of a hub's view of keys and subscriptions: every successful index read marks it
//! current ([`Hub::viewed`]); a process whose view is older than its bound closes its sessions
//! with [`STALE_VIEW`] (sent as 1013, try again later) and admits none, so a key revoked while
//! the process cannot read Postgres never keeps streaming from it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pmw_core::UnixMs;

use super::Hub;

/// The hub's close code for sessions let go because its view is stale: sent as 1013 with a
/// reason of its own (a slow consumer's 1013 says something else).
pub const STALE_VIEW: u16 = 10_013;

impl Hub {
    /// The view of keys and subscriptions is current now.
    pub fn viewed(&self) {
        self.viewed_ms.fetch_max(UnixMs::now().0, Ordering::SeqCst);
    }

    /// How long since the view was last confirmed current.
    pub fn view_age(&self) -> Duration {
        let age = UnixMs::now().0 - self.viewed_ms.load(Ordering::SeqCst);
        Duration::from_millis(age.max(0) as u64)
    }

    /// Whether the view is older than `bound`.
    pub fn is_stale(&self, bound: Duration) -> bool {
        self.view_age() > bound
    }

    /// When the view is older than `bound`: close every session ([`STALE_VIEW`]) and return
    /// how many; otherwise 0.
    pub fn close_if_stale(&self, bound: Duration) -> usize {
        if !self.is_stale(bound) {
            return 0;
        }
        let n = self.sessions();
        if n > 0 {
            self.close_all(STALE_VIEW);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_older_than_its_bound_is_stale_until_confirmed() {
        let hub = Hub::default();
        assert!(!hub.is_stale(Duration::from_secs(30)));
        hub.viewed_ms
            .store(UnixMs::now().0 - 60_000, Ordering::SeqCst);
        assert!(hub.is_stale(Duration::from_secs(30)));
        assert_eq!(
            hub.close_if_stale(Duration::from_secs(30)),
            0,
            "no sessions"
        );
        hub.viewed();
        assert!(!hub.is_stale(Duration::from_secs(30)));
    }
}
