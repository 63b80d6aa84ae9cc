//! The ClickHouse version floor: every row pmw-live writes (ingest, unwind, audit) carries a
//! `version` that is the clock in ms, but always above the last one written or seen, so a
//! retraction never ties the row it replaces and a re-insert never ties its retraction.

use pmw_core::UnixMs;

/// The highest version written or seen; the next one is above it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VersionFloor(u64);

impl VersionFloor {
    /// The version of rows written now.
    pub fn next_now(&mut self) -> u64 {
        self.next_at(UnixMs::now().0 as u64)
    }

    /// The version of rows written at `clock_ms`: the clock, but above the floor.
    pub fn next_at(&mut self, clock_ms: u64) -> u64 {
        let v = clock_ms.max(self.0 + 1);
        self.0 = v;
        v
    }

    /// A version already in the store (a retraction's, a stored row's): later ones are above it.
    pub fn raise(&mut self, seen: u64) {
        self.0 = self.0.max(seen);
    }
}

#[cfg(test)]
mod tests {
    use super::VersionFloor;

    #[test]
    fn follows_the_clock_while_it_moves_forward() {
        let mut f = VersionFloor::default();
        assert_eq!(f.next_at(1_000), 1_000);
        assert_eq!(f.next_at(2_500), 2_500);
    }

    #[test]
    fn never_repeats_or_goes_back_when_the_clock_does() {
        let mut f = VersionFloor::default();
        assert_eq!(f.next_at(1_000), 1_000);
        assert_eq!(f.next_at(1_000), 1_001);
        assert_eq!(f.next_at(400), 1_002);
    }

    #[test]
    fn a_version_seen_in_the_store_lifts_the_floor() {
        let mut f = VersionFloor::default();
        f.raise(5_000);
        assert_eq!(f.next_at(1_000), 5_001);
        f.raise(10);
        assert_eq!(
            f.next_at(1_000),
            5_002,
            "raising to a lower version changes nothing"
        );
    }
}
