//! The head race: which provider announced each block hash first (its arrival stamps
//! `t_detect_ms` and is the only one ingest sees) and how far behind that winner every later
//! announcer of the same hash was.

use std::collections::HashMap;

/// Hashes this many blocks below the highest number seen are forgotten.
const KEEP_BLOCKS: u64 = 256;
/// At most this many hashes are remembered (a flood of side-branch heads cannot grow it).
const MAX_ENTRIES: usize = 4_096;

/// What one announcement of a head was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first announcement of this hash: ingest takes it.
    First,
    /// Another provider announced it first, `lag_ms` earlier.
    Later { winner: usize, lag_ms: i64 },
    /// The same provider announced it again (its WebSocket and its poll both saw it).
    Repeat,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    number: u64,
    first_ms: i64,
    winner: usize,
    /// Bit `i` set: provider `i` announced it.
    seen: u64,
    /// Handed to ingest ([`Race::deliver`]).
    delivered: bool,
}

/// The race table, bounded by [`KEEP_BLOCKS`] and [`MAX_ENTRIES`].
#[derive(Debug, Default)]
pub struct Race {
    by_hash: HashMap<[u8; 32], Entry>,
    top: u64,
}

impl Race {
    /// Record that `provider` announced `hash` (block `number`) at `t_ms`.
    pub fn arrive(&mut self, provider: usize, hash: [u8; 32], number: u64, t_ms: i64) -> Arrival {
        let bit = 1u64 << provider;
        let arrival = match self.by_hash.get_mut(&hash) {
            Some(e) if e.seen & bit != 0 => Arrival::Repeat,
            Some(e) => {
                e.seen |= bit;
                Arrival::Later {
                    winner: e.winner,
                    lag_ms: (t_ms - e.first_ms).max(0),
                }
            }
            None => {
                self.by_hash.insert(
                    hash,
                    Entry {
                        number,
                        first_ms: t_ms,
                        winner: provider,
                        seen: bit,
                        delivered: false,
                    },
                );
                Arrival::First
            }
        };
        if number > self.top {
            self.top = number;
            self.prune();
        } else if self.by_hash.len() > MAX_ENTRIES {
            self.prune();
        }
        arrival
    }

    /// The provider that announced `hash` first, if it is still remembered.
    pub fn winner(&self, hash: &[u8; 32]) -> Option<usize> {
        self.by_hash.get(hash).map(|e| e.winner)
    }

    /// Mark `hash` handed to ingest: `true` the first time (it is remembered and was not yet).
    pub fn deliver(&mut self, hash: &[u8; 32]) -> bool {
        self.by_hash
            .get_mut(hash)
            .is_some_and(|e| !std::mem::replace(&mut e.delivered, true))
    }

    /// Who announced `hash` (bit `i`: provider `i`), 0 when it is not remembered.
    pub fn seen(&self, hash: &[u8; 32]) -> u64 {
        self.by_hash.get(hash).map_or(0, |e| e.seen)
    }

    fn prune(&mut self) {
        let floor = self.top.saturating_sub(KEEP_BLOCKS);
        self.by_hash.retain(|_, e| e.number >= floor);
        if self.by_hash.len() > MAX_ENTRIES {
            // Still too many (many hashes at recent heights): keep the highest numbers.
            let mut numbers: Vec<u64> = self.by_hash.values().map(|e| e.number).collect();
            numbers.sort_unstable_by(|a, b| b.cmp(a));
            let cut = numbers[MAX_ENTRIES - 1];
            self.by_hash.retain(|_, e| e.number > cut);
        }
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> [u8; 32] {
        [n; 32]
    }

    #[test]
    fn the_first_announcer_wins_and_later_ones_are_timed_against_it() {
        let mut r = Race::default();
        assert_eq!(r.arrive(1, h(1), 10, 1_000), Arrival::First);
        assert_eq!(
            r.arrive(0, h(1), 10, 1_203),
            Arrival::Later {
                winner: 1,
                lag_ms: 203
            }
        );
        assert_eq!(r.arrive(1, h(1), 10, 1_300), Arrival::Repeat);
        assert_eq!(r.arrive(0, h(1), 10, 1_400), Arrival::Repeat);
        assert_eq!(r.winner(&h(1)), Some(1));
    }

    #[test]
    fn two_hashes_at_one_height_are_two_races() {
        let mut r = Race::default();
        assert_eq!(r.arrive(0, h(1), 10, 0), Arrival::First);
        assert_eq!(r.arrive(1, h(2), 10, 5), Arrival::First);
        assert_eq!(r.winner(&h(2)), Some(1));
    }

    #[test]
    fn old_heights_are_forgotten() {
        let mut r = Race::default();
        r.arrive(0, h(1), 10, 0);
        r.arrive(0, h(2), 10 + KEEP_BLOCKS + 1, 0);
        assert_eq!(r.winner(&h(1)), None);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_flood_at_one_height_stays_bounded() {
        let mut r = Race::default();
        for i in 0..(MAX_ENTRIES as u64 + 100) {
            let mut hash = [0u8; 32];
            hash[..8].copy_from_slice(&i.to_le_bytes());
            r.arrive(0, hash, 100 + i / 2, 0);
        }
        assert!(r.len() <= MAX_ENTRIES, "{}", r.len());
    }
}
