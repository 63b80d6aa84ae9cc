//! A subscriber's resume point: a cursor and, when known, the first 8 hex digits of the hash of
//! its block (`000000000101-000003:ab12cd34`). The hash lets the server tell whether the block
//! the client last saw is still canonical: if a reorg replaced it, the client first gets
//! `retract`s for what it may hold from the orphaned blocks, then the canonical branch again.

use std::fmt;
use std::str::FromStr;

use super::cursor::{Cursor, CursorError};

/// Hex digits of the block hash a position carries.
pub const HASH_DIGITS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Position {
    pub cursor: Cursor,
    /// The first bytes of the block's hash (`None`: a plain cursor).
    pub hash: Option<[u8; HASH_DIGITS / 2]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    #[error("{0}")]
    Cursor(#[from] CursorError),
    #[error("the block hash after ':' must be {HASH_DIGITS} hex digits")]
    BadHash,
}

impl Position {
    /// The position of a trade in block `block_hash` (`0x…`, any case).
    pub fn of(cursor: Cursor, block_hash: &str) -> Position {
        Position {
            cursor,
            hash: prefix(block_hash),
        }
    }

    /// The position of `cursor` in the block whose hash is `block_hash`, when known (else a
    /// plain cursor).
    pub fn maybe(cursor: Cursor, block_hash: Option<&str>) -> Position {
        match block_hash {
            Some(h) => Position::of(cursor, h),
            None => Position { cursor, hash: None },
        }
    }

    /// Whether `block_hash` (`0x…`) is this position's block; `true` for a plain cursor.
    pub fn matches(&self, block_hash: &str) -> bool {
        self.hash.is_none() || prefix(block_hash) == self.hash
    }
}

/// The first [`HASH_DIGITS`] hex digits of a `0x…` hash, as bytes.
fn prefix(block_hash: &str) -> Option<[u8; HASH_DIGITS / 2]> {
    let h = block_hash.trim_start_matches("0x");
    let mut out = [0u8; HASH_DIGITS / 2];
    hex::decode_to_slice(h.get(..HASH_DIGITS)?, &mut out).ok()?;
    Some(out)
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.hash {
            Some(h) => write!(f, "{}:{}", self.cursor, hex::encode(h)),
            None => write!(f, "{}", self.cursor),
        }
    }
}

impl FromStr for Position {
    type Err = PositionError;

    /// `<cursor>` or `<cursor>:<8 hex digits>`.
    fn from_str(s: &str) -> Result<Position, PositionError> {
        let (cursor, hash) = match s.split_once(':') {
            Some((c, h)) => (c, Some(h)),
            None => (s, None),
        };
        let cursor: Cursor = cursor.parse()?;
        let hash = match hash {
            None => None,
            Some(h) if h.len() == HASH_DIGITS => Some(prefix(h).ok_or(PositionError::BadHash)?),
            Some(_) => return Err(PositionError::BadHash),
        };
        Ok(Position { cursor, hash })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_print_and_match() {
        let p: Position = "000000000101-000003:AB12cd34".parse().unwrap();
        assert_eq!(
            p.cursor,
            Cursor {
                block: 101,
                log_index: 3
            }
        );
        assert_eq!(p.to_string(), "000000000101-000003:ab12cd34");
        assert!(p.matches("0xab12cd34ffff"));
        assert!(!p.matches("0xab12cd35ffff"));
        let plain: Position = "000000000101-000003".parse().unwrap();
        assert_eq!(plain.hash, None);
        assert!(plain.matches("0x00"));
        assert_eq!(plain.to_string(), "000000000101-000003");
        let of = Position::of(
            Cursor {
                block: 7,
                log_index: 0,
            },
            "0xDEADBEEF00",
        );
        assert_eq!(of.to_string(), "000000000007-000000:deadbeef");
        for bad in [
            "000000000101-000003:",
            "000000000101-000003:ab12",
            "000000000101-000003:zz12cd34",
            "x:ab12cd34",
        ] {
            assert!(bad.parse::<Position>().is_err(), "{bad}");
        }
    }
}
