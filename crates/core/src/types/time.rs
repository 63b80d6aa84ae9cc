//! Millisecond UTC timestamps: the only time representation on any write path (`*_ms` columns).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, UTC. Never seconds, never a timezone-naive string.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixMs(pub i64);

impl UnixMs {
    /// The local wall clock now.
    pub fn now() -> UnixMs {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        UnixMs(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    pub fn from_secs(secs: i64) -> UnixMs {
        UnixMs(secs.saturating_mul(1000))
    }

    pub fn as_i64(self) -> i64 {
        self.0
    }

    /// RFC 3339 with an explicit `Z`, for humans and logs only.
    pub fn to_rfc3339(self) -> String {
        chrono::DateTime::from_timestamp_millis(self.0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_else(|| format!("invalid({})", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_utc_with_z() {
        assert_eq!(
            UnixMs(1_764_672_000_123).to_rfc3339(),
            "2025-12-02T10:40:00.123Z"
        );
        assert_eq!(UnixMs::from_secs(1), UnixMs(1000));
    }

    #[test]
    fn now_is_milliseconds() {
        let n = UnixMs::now().0;
        // Between 2020 and 2100 in milliseconds: rules out seconds and microseconds.
        assert!(n > 1_577_836_800_000 && n < 4_102_444_800_000, "{n}");
    }
}
