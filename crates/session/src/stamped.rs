//! A hub item's frames as stamped for the sessions that write it: every session stamps its own
//! `t_push_ms`, but the sessions that write an item in the same millisecond would stamp the same
//! bytes, so they share one copy (a reference count) instead of each making a string of the
//! body. The bytes a session writes are exactly what [`pmw_core::message::stamp`] makes of the
//! body at that session's own write time.

use std::sync::Mutex;

use axum::extract::ws::Utf8Bytes;
use pmw_core::message::{stamp, Kind};

use crate::hub::Item;

/// Which of an item's bodies: its full body, or a `final`'s small one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Full,
    Brief,
}

/// The last frame stamped of each body, with the millisecond it was stamped at.
#[derive(Debug, Default)]
pub struct Stamped {
    full: Mutex<Option<(i64, Utf8Bytes)>>,
    brief: Mutex<Option<(i64, Utf8Bytes)>>,
}

impl Stamped {
    /// `body` as a `kind` message stamped `now`: the copy stamped at `now` already, if the last
    /// one was, else a new one (kept for the sessions that follow within the millisecond).
    fn frame(&self, which: Body, kind: Kind, body: &str, now: i64) -> Utf8Bytes {
        let mut slot = lock(match which {
            Body::Full => &self.full,
            Body::Brief => &self.brief,
        });
        match &*slot {
            Some((at, bytes)) if *at == now => bytes.clone(),
            _ => {
                let bytes = Utf8Bytes::from(stamp(kind, body, now));
                *slot = Some((now, bytes.clone()));
                bytes
            }
        }
    }
}

impl Item {
    /// The item's message (its kind, its full body) as a session writes it at `now`.
    pub fn stamped_at(&self, now: i64) -> Utf8Bytes {
        self.stamped.frame(Body::Full, self.kind, &self.body, now)
    }

    /// A `final`'s small body (its full one if it has none) as a `trade,final` session writes
    /// it at `now`.
    pub fn brief_stamped_at(&self, now: i64) -> Utf8Bytes {
        let brief = self.brief.as_deref().unwrap_or(&self.body);
        self.stamped.frame(Body::Brief, Kind::Final, brief, now)
    }
}

/// A poisoned slot is still a valid cache (it only ever holds a whole value).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_millisecond_shares_one_copy_and_another_gets_its_own_stamp() {
        let s = Stamped::default();
        let body = r#"{"block":11,"maker":"0x01"}"#;
        let a = s.frame(Body::Full, Kind::Trade, body, 5);
        let b = s.frame(Body::Full, Kind::Trade, body, 5);
        assert_eq!(
            a.as_str(),
            r#"{"type":"trade","t_push_ms":5,"block":11,"maker":"0x01"}"#
        );
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes, not a copy");
        let c = s.frame(Body::Full, Kind::Trade, body, 6);
        assert!(
            c.starts_with(r#"{"type":"trade","t_push_ms":6,"block""#),
            "{c}"
        );
        assert_ne!(a.as_ptr(), c.as_ptr());
        // An earlier session's millisecond after a later one's (two writer threads): its own.
        let d = s.frame(Body::Full, Kind::Trade, body, 5);
        assert_eq!(d.as_str(), a.as_str());
        // The brief body has a slot of its own.
        let e = s.frame(Body::Brief, Kind::Final, r#"{"brief":1}"#, 5);
        assert_eq!(e.as_str(), r#"{"type":"final","t_push_ms":5,"brief":1}"#);
        assert_eq!(
            s.frame(Body::Full, Kind::Trade, body, 5).as_ptr(),
            d.as_ptr()
        );
    }
}
