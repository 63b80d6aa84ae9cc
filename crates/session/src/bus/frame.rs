//! One frame on the bus: its stable message id (cursor, block hash, account, kind), the frame a
//! leader publishes and the frame a follower receives, and the headers that carry them.

use std::fmt;
use std::str::FromStr;

use async_nats::HeaderMap;
use bytes::Bytes;

use super::{check_token, BusError};
use pmw_core::Cursor;

/// Header: the stream sequence of the previous frame on the same account's subject (0: none),
/// the chain a follower checks to find gaps.
pub(crate) const PREV: &str = "Pmw-Prev";
/// Header: the epoch of the leader that published the message.
pub(crate) const EPOCH: &str = "Pmw-Epoch";

/// The stable identity of a frame, its JetStream message id: the same round computed by any
/// leader gives the same ids, so a successor's republish is a duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameId {
    pub cursor: Cursor,
    /// The block's hash, `0x`-prefixed hex (a reorged block gives other ids).
    pub block_hash: String,
    pub account: String,
    /// `trade`, `retract`, `final`, …: one frame per kind at a position.
    pub kind: String,
}

impl FrameId {
    /// Checks that every part is one id field (no `:`; account and kind subject tokens).
    pub fn validate(&self) -> Result<(), BusError> {
        check_token(&self.account)?;
        check_token(&self.kind)?;
        let hex = self.block_hash.strip_prefix("0x").unwrap_or("");
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BusError::Invalid(format!(
                "block hash {:?} is not 0x-prefixed hex",
                self.block_hash
            )));
        }
        Ok(())
    }
}

impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.cursor, self.block_hash, self.account, self.kind
        )
    }
}

impl FromStr for FrameId {
    type Err = BusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BusError::Invalid(format!("{s:?} is not a frame id"));
        let mut parts = s.split(':');
        let (Some(c), Some(h), Some(a), Some(k), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let id = FrameId {
            cursor: c.parse().map_err(|_| bad())?,
            block_hash: h.into(),
            account: a.into(),
            kind: k.into(),
        };
        id.validate()?;
        Ok(id)
    }
}

/// A frame a leader publishes: its id and the rendered body sessions are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFrame {
    pub id: FrameId,
    pub body: Bytes,
}

/// A frame a follower received, with where the stream stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The stream sequence it was stored at.
    pub seq: u64,
    /// When the broker stored it (ms since the epoch, the stream leader's clock; 0: unknown).
    pub stored_ms: i64,
    /// The stream sequence of the account's previous frame (0: none).
    pub prev: u64,
    /// The epoch of the leader that stored it.
    pub epoch: i64,
    pub id: FrameId,
    pub body: Bytes,
}

/// A u64 header, 0 when absent.
pub(crate) fn header_u64(h: Option<&HeaderMap>, name: &str) -> Result<u64, BusError> {
    match h.and_then(|h| h.get(name)) {
        None => Ok(0),
        Some(v) => v
            .as_str()
            .parse()
            .map_err(|_| BusError::Invalid(format!("header {name}: {:?}", v.as_str()))),
    }
}

/// The `Nats-Msg-Id` of a stored message (the client parses it into its standard name).
pub(crate) fn msg_id(h: Option<&HeaderMap>) -> Option<&str> {
    h.and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
        .map(|v| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> FrameId {
        FrameId {
            cursor: Cursor::new(123, 4).unwrap(),
            block_hash: "0xabc0".into(),
            account: "acct-1".into(),
            kind: "trade".into(),
        }
    }

    #[test]
    fn ids_read_back_what_they_print() {
        let printed = id().to_string();
        assert_eq!(printed, "000000000123-000004:0xabc0:acct-1:trade");
        assert_eq!(printed.parse::<FrameId>().unwrap(), id());
    }

    #[test]
    fn ids_with_foreign_parts_are_refused() {
        for s in [
            "000000000123-000004:0xabc0:acct-1",
            "000000000123-000004:0xabc0:acct-1:trade:x",
            "000000000123-000004:abc0:acct-1:trade",
            "000000000123-000004:0xzz:acct-1:trade",
            "000000000123-000004:0xabc0:acct.1:trade",
            "123-4:0xabc0:acct-1:trade",
        ] {
            assert!(s.parse::<FrameId>().is_err(), "{s}");
        }
    }
}
