//! Time windows with a lower and an upper bound: a corrupt far-future row can never sit in every window.

use std::time::Duration;

use crate::types::UnixMs;

/// `[from_ms, to_ms)` in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Window {
    /// The window of length `len` ending at `now` (exclusive upper bound one ms after now).
    pub fn ending_at(now: UnixMs, len: Duration) -> Window {
        let len_ms = i64::try_from(len.as_millis()).unwrap_or(i64::MAX);
        Window {
            from_ms: now.0.saturating_sub(len_ms),
            to_ms: now.0.saturating_add(1),
        }
    }

    pub fn contains(&self, t_ms: i64) -> bool {
        t_ms >= self.from_ms && t_ms < self.to_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_two_sided() {
        let w = Window::ending_at(UnixMs(10_000), Duration::from_secs(3));
        assert_eq!(
            w,
            Window {
                from_ms: 7_000,
                to_ms: 10_001
            }
        );
        assert!(w.contains(7_000) && w.contains(10_000));
        assert!(!w.contains(6_999) && !w.contains(10_001) && !w.contains(i64::MAX));
    }
}
