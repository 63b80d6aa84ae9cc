//! Trade cursor `(block_number, log_index)` and its fixed-width string form, which sorts like the pair.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Position of a trade in the ledger. Ordered by block, then log index.
/// The wire form is `BBBBBBBBBBBB-LLLLLL` (12 + 6 zero-padded decimal digits),
/// so string order equals ledger order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Cursor {
    pub block: u64,
    pub log_index: u32,
}

const BLOCK_DIGITS: usize = 12;
const LOG_DIGITS: usize = 6;
const LEN: usize = BLOCK_DIGITS + 1 + LOG_DIGITS;
/// Largest block number the string form can carry.
pub const MAX_BLOCK: u64 = 999_999_999_999;
/// Largest log index the string form can carry.
pub const MAX_LOG_INDEX: u32 = 999_999;

/// Why a string or pair is not a valid cursor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor must be {LEN} characters like 000012345678-000042, got {0} characters")]
    BadLength(usize),
    #[error("cursor must be 12 digits, '-', 6 digits (like 000012345678-000042)")]
    BadFormat,
    #[error("cursor block {0} exceeds {MAX_BLOCK}")]
    BlockTooLarge(u64),
    #[error("cursor log index {0} exceeds {MAX_LOG_INDEX}")]
    LogIndexTooLarge(u32),
}

impl Cursor {
    /// The cursor before every trade.
    pub const ORIGIN: Cursor = Cursor {
        block: 0,
        log_index: 0,
    };

    pub fn new(block: u64, log_index: u32) -> Result<Cursor, CursorError> {
        if block > MAX_BLOCK {
            return Err(CursorError::BlockTooLarge(block));
        }
        if log_index > MAX_LOG_INDEX {
            return Err(CursorError::LogIndexTooLarge(log_index));
        }
        Ok(Cursor { block, log_index })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:012}-{:06}", self.block, self.log_index)
    }
}

impl FromStr for Cursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != LEN {
            return Err(CursorError::BadLength(s.chars().count()));
        }
        let b = s.as_bytes();
        let digits_ok = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        if b[BLOCK_DIGITS] != b'-'
            || !digits_ok(0..BLOCK_DIGITS)
            || !digits_ok(BLOCK_DIGITS + 1..LEN)
        {
            return Err(CursorError::BadFormat);
        }
        // Digits were checked above and fit their types by width.
        let block = s[..BLOCK_DIGITS]
            .parse()
            .map_err(|_| CursorError::BadFormat)?;
        let log_index = s[BLOCK_DIGITS + 1..]
            .parse()
            .map_err(|_| CursorError::BadFormat)?;
        Ok(Cursor { block, log_index })
    }
}

impl Serialize for Cursor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fixed_width() {
        let c = Cursor::new(81_234_567, 42).unwrap();
        assert_eq!(c.to_string(), "000081234567-000042");
        assert_eq!(Cursor::ORIGIN.to_string(), "000000000000-000000");
        assert_eq!(
            Cursor::new(MAX_BLOCK, MAX_LOG_INDEX).unwrap().to_string(),
            "999999999999-999999"
        );
    }

    #[test]
    fn string_order_equals_ledger_order() {
        let blocks = [
            0u64,
            1,
            9,
            10,
            99,
            100,
            65_000_000,
            81_234_567,
            100_000_000,
            MAX_BLOCK,
        ];
        let logs = [0u32, 1, 9, 10, 255, 1_000, 99_999, MAX_LOG_INDEX];
        let mut all = Vec::new();
        for b in blocks {
            for l in logs {
                all.push(Cursor::new(b, l).unwrap());
            }
        }
        for x in &all {
            for y in &all {
                assert_eq!(
                    x.cmp(y),
                    x.to_string().cmp(&y.to_string()),
                    "{x:?} vs {y:?}"
                );
            }
        }
    }

    #[test]
    fn parse_round_trips() {
        for c in [
            Cursor::ORIGIN,
            Cursor::new(7, 3).unwrap(),
            Cursor::new(MAX_BLOCK, 0).unwrap(),
        ] {
            assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        }
    }

    #[test]
    fn bad_input_is_rejected_clearly() {
        assert_eq!("".parse::<Cursor>(), Err(CursorError::BadLength(0)));
        assert_eq!(
            "81234567-42".parse::<Cursor>(),
            Err(CursorError::BadLength(11))
        );
        assert_eq!(
            "000081234567_000042".parse::<Cursor>(),
            Err(CursorError::BadFormat)
        );
        assert_eq!(
            "00008123456a-000042".parse::<Cursor>(),
            Err(CursorError::BadFormat)
        );
        assert_eq!(
            "000081234567-0000-2".parse::<Cursor>(),
            Err(CursorError::BadFormat)
        );
        assert_eq!(
            "+00081234567-000042".parse::<Cursor>(),
            Err(CursorError::BadFormat)
        );
        assert_eq!(
            Cursor::new(MAX_BLOCK + 1, 0),
            Err(CursorError::BlockTooLarge(MAX_BLOCK + 1))
        );
        assert_eq!(
            Cursor::new(0, 1_000_000),
            Err(CursorError::LogIndexTooLarge(1_000_000))
        );
        let msg = "garbage".parse::<Cursor>().unwrap_err().to_string();
        assert!(msg.contains("000012345678-000042"), "{msg}");
    }

    #[test]
    fn serde_uses_the_string_form() {
        let c = Cursor::new(5, 6).unwrap();
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            "\"000000000005-000006\""
        );
        assert!(serde_json::from_str::<Cursor>("\"5-6\"").is_err());
    }
}
