//! A push round as the bus carries it: what the WebSocket lane read and claimed (the rewind, the
//! retractions, the trades in ledger order, each with its market) between two positions, so an
//! edge builds exactly the items the leader's own hub dispatches and matches them to its
//! sessions with its own index (a session's wallet set and filters are its own, read when it
//! connects: a leader's older index must never drop a trade of a wallet it already follows).
//!
//! One round is one or more messages on one subject (`<prefix>.frames.all`), each under NATS's
//! payload limit: part k covers `(from_k, through_k]`, the next part starts where it ended and
//! the last one ends at the round's `through`. The rewind and the retractions travel in the
//! first part only. A part's message id is its kind, its `through` position and that block's
//! hash, so a successor that reads the same range publishes the same ids (stored once); one that
//! reads a longer range publishes parts that overlap what is stored, and a follower skips
//! positions it has passed.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{BusError, FrameId, OutFrame};
use pmw_core::ch::TradeRow;
use pmw_core::message::Market;
use pmw_core::{Cursor, Position};

use crate::pending::PendingRow;

/// The account token of the subject every round goes to.
pub const ALL: &str = "all";

/// Rows per message: a part stays well under NATS's default 1 MiB payload limit (a row with
/// its market is about 1 KiB as JSON).
pub const ROWS_PER_PART: usize = 200;

/// Which of push's streams a round belongs to (the message id's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// `trade`s and `retract`s as ingested (the WebSocket lane).
    Ledger,
    /// `final`s behind the finalized watermark (the finality lane).
    Final,
    /// `pending`s and `void`s of the pending tier (push's pending lane): no ledger position.
    Pending,
}

impl Stream {
    fn token(self) -> &'static str {
        match self {
            Stream::Ledger => "ledger",
            Stream::Final => "final",
            Stream::Pending => "pending",
        }
    }
}

/// One ledger row of a round and the market it is rendered with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundRow {
    pub row: TradeRow,
    pub market: Option<Market>,
    /// The pending fill the trade confirmed (`ledger.pending_id`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<i64>,
}

/// A pending-tier event and the market it is rendered with (a `pending` part's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    pub row: PendingRow,
    pub market: Option<Market>,
}

/// One message of a round (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundPart {
    pub stream: Stream,
    /// Where this part starts: the previous part's `through`, or the lane's position (the common
    /// ancestor after a reorg) for the first.
    #[serde(with = "position_text")]
    pub from: Position,
    /// Where it ends: its last row's position, or the round's `through` for the last part.
    #[serde(with = "position_text")]
    pub through: Position,
    /// A reorg moved `from` below what was delivered (first part only).
    pub rewound: bool,
    pub reorg_id: i64,
    /// The lane's watermark when the round read (the sessions' heartbeat head).
    pub watermark: Option<u64>,
    /// Trades of orphaned blocks, to retract (first part only).
    pub retracts: Vec<RoundRow>,
    /// Trades after `from` through `through`, in ledger order.
    pub rows: Vec<RoundRow>,
    /// A `pending` part's events, in id order (its `from` and `through` are the default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingEntry>,
}

/// A whole round, before [`RoundPart::parts`] splits it: one part from the lane's position to
/// the round's end.
pub type Round = RoundPart;

/// A row's position: its cursor with its block's hash.
fn position_of(row: &TradeRow) -> Result<Position, BusError> {
    let cursor = Cursor::new(row.block_number, row.log_index)
        .map_err(|e| BusError::Invalid(format!("row position: {e}")))?;
    Ok(Position::of(cursor, &row.block_hash))
}

/// Where a round stands in the ledger: the span `(from, through]` it covers, whether it rewinds
/// (a reorg moved the cursor back) and the reorg it read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: Position,
    pub through: Position,
    pub rewound: bool,
    pub reorg_id: i64,
}

impl Round {
    /// A round of `retracts` and `rows` over `span`, each row with the market `market` gives for
    /// its token.
    pub fn of_rows(
        stream: Stream,
        span: Span,
        watermark: Option<u64>,
        retracts: &[TradeRow],
        rows: &[TradeRow],
        market: impl Fn(&str) -> Option<Market>,
    ) -> Round {
        let Span {
            from,
            through,
            rewound,
            reorg_id,
        } = span;
        let with_market = |rows: &[TradeRow]| -> Vec<RoundRow> {
            rows.iter()
                .map(|r| RoundRow {
                    row: r.clone(),
                    market: market(&r.token_id),
                    pending_id: None,
                })
                .collect()
        };
        Round {
            stream,
            from,
            through,
            rewound,
            reorg_id,
            watermark,
            retracts: with_market(retracts),
            rows: with_market(rows),
            pending: Vec::new(),
        }
    }

    /// The same round with each trade (and retract) naming the pending fill it confirmed.
    pub fn confirming(mut self, pending: impl Fn(&TradeRow) -> Option<i64>) -> Round {
        for r in self.rows.iter_mut().chain(self.retracts.iter_mut()) {
            r.pending_id = pending(&r.row);
        }
        self
    }

    /// A `pending` part: the pending tier's `entries` (at most [`ROWS_PER_PART`] a part is
    /// the caller's to keep), no ledger position.
    pub fn of_pending(entries: Vec<PendingEntry>, watermark: Option<u64>) -> Round {
        Round {
            stream: Stream::Pending,
            from: Position::default(),
            through: Position::default(),
            rewound: false,
            reorg_id: 0,
            watermark,
            retracts: Vec::new(),
            rows: Vec::new(),
            pending: entries,
        }
    }

    /// The round as messages of at most `per_part` rows each (at least one message).
    pub fn parts(self, per_part: usize) -> Result<Vec<RoundPart>, BusError> {
        let per_part = per_part.max(1);
        let mut parts = Vec::new();
        let mut from = self.from;
        let mut rows = self.rows.into_iter().peekable();
        let mut retracts = Some(self.retracts);
        let mut pending = Some(self.pending);
        loop {
            let chunk: Vec<RoundRow> = rows.by_ref().take(per_part).collect();
            let last = rows.peek().is_none();
            let through = match chunk.last() {
                Some(r) if !last => position_of(&r.row)?,
                _ => self.through,
            };
            let first = parts.is_empty();
            parts.push(RoundPart {
                stream: self.stream,
                from,
                through,
                rewound: first && self.rewound,
                reorg_id: self.reorg_id,
                watermark: self.watermark,
                retracts: retracts.take().unwrap_or_default(),
                rows: chunk,
                pending: pending.take().unwrap_or_default(),
            });
            if last {
                return Ok(parts);
            }
            from = through;
        }
    }
}

impl RoundPart {
    /// The message id: the part's kind and `through`, with the hash of `through`'s block (`0x0`
    /// when the position carries none); a `pending` part's names its last event id instead.
    pub fn id(&self) -> FrameId {
        let last_event = self.pending.last().map(|e| e.row.event_id);
        let hash = match (self.stream, last_event) {
            (Stream::Pending, Some(id)) => format!("{id:x}"),
            _ => self
                .through
                .hash
                .map(hex::encode)
                .unwrap_or_else(|| "0".into()),
        };
        FrameId {
            cursor: self.through.cursor,
            block_hash: format!("0x{hash}"),
            account: ALL.into(),
            kind: self.stream.token().into(),
        }
    }

    /// The part as a bus frame: its JSON, LZ4-compressed when longer than [`COMPRESS_ABOVE`]
    /// (see [`encode_body`]).
    pub fn to_frame(&self) -> Result<OutFrame, BusError> {
        let json =
            serde_json::to_vec(self).map_err(|e| BusError::Invalid(format!("round part: {e}")))?;
        Ok(OutFrame {
            id: self.id(),
            body: encode_body(json),
        })
    }

    /// A part from a frame's body, plain or compressed.
    pub fn from_body(body: &[u8]) -> Result<RoundPart, BusError> {
        let json = decode_body(body)?;
        serde_json::from_slice(&json).map_err(|e| BusError::Invalid(format!("round part: {e}")))
    }
}

/// Parts whose JSON is longer than this are compressed; a small part stays readable JSON.
const COMPRESS_ABOVE: usize = 4096;

/// The largest part a compressed body may claim to expand to: NATS's largest payload (64 MiB),
/// so a valid part always fits and a corrupt size cannot allocate more.
const MAX_PART_BYTES: usize = 64 << 20;

/// The first byte of a compressed body (a JSON body starts with `{`), followed by the JSON's
/// length (u32, little endian) and the LZ4 block. The broker's replication, storage and each
/// edge's delivery of a 200-row part cost in proportion to its bytes: 128 KiB takes an idle
/// 3-node cluster about 2 ms to store, 1 KiB about 0.6 ms (docs/PROFILE.md).
const LZ4: u8 = 0x01;

fn encode_body(json: Vec<u8>) -> Bytes {
    if json.len() <= COMPRESS_ABOVE {
        return Bytes::from(json);
    }
    let mut body = Vec::with_capacity(5 + json.len() / 2);
    body.push(LZ4);
    body.extend_from_slice(&(json.len() as u32).to_le_bytes());
    body.extend_from_slice(&lz4_flex::block::compress(&json));
    Bytes::from(body)
}

fn decode_body(body: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, BusError> {
    let invalid = |why: String| BusError::Invalid(format!("round part: {why}"));
    match body.first() {
        Some(&LZ4) => {
            let len: [u8; 4] = body
                .get(1..5)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| invalid("compressed body without its length".into()))?;
            let len = u32::from_le_bytes(len) as usize;
            if len > MAX_PART_BYTES {
                return Err(invalid(format!("claims {len} bytes uncompressed")));
            }
            lz4_flex::block::decompress(&body[5..], len)
                .map(std::borrow::Cow::Owned)
                .map_err(|e| invalid(format!("lz4: {e}")))
        }
        _ => Ok(std::borrow::Cow::Borrowed(body)),
    }
}

/// Positions as their text form (`cursor:hash`), as clients see them.
mod position_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use pmw_core::Position;

    pub fn serialize<S: Serializer>(p: &Position, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Position, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block: u64, log_index: u32) -> RoundRow {
        RoundRow {
            row: TradeRow {
                block_number: block,
                log_index,
                block_hash: format!("0x{:064x}", block * 1000 + 7),
                tx_hash: format!("0x{:064x}", 1),
                block_time_ms: 1_700_000_000_000,
                exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
                exchange_version: 1,
                order_hash: format!("0x{:064x}", 2),
                maker: "0x00000000000000000000000000000000000000aa".into(),
                taker: "0x00000000000000000000000000000000000000bb".into(),
                side: 1,
                token_id: "123".into(),
                shares: "10.5".into(),
                collateral: "5.25".into(),
                price: "0.5".into(),
                fee: "0".into(),
                fee_asset: "collateral".into(),
                t_detect_ms: 1_700_000_000_500,
                backfilled: 0,
                retracted: 0,
                version: 9,
                audit: 0,
            },
            market: None,
            pending_id: None,
        }
    }

    /// A row as a busy block has them: its own order hash, a transaction per match of four
    /// fills, wallets and markets from small sets (random hex where a chain has it).
    fn busy_row(i: u64) -> RoundRow {
        let hash = |x: u64| {
            format!(
                "0x{:064x}",
                (x as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835_u128)
            )
        };
        let wallet = |x: u64| {
            format!(
                "0x{:040x}",
                (x as u128 % 12 + 1) * 0x1111_1111_1111_1111_1111
            )
        };
        let mut r = row(100 + i / 50, (i % 50) as u32);
        r.row.block_hash = hash(1_000 + i / 50);
        r.row.tx_hash = hash(2_000 + i / 4);
        r.row.order_hash = hash(3_000 + i);
        r.row.maker = wallet(i);
        r.row.taker = wallet(i / 4 + 5);
        r.row.token_id = format!("{}", u128::MAX / 3 - (i % 6) as u128);
        r.row.shares = format!("{}.{}", 10 + i % 90, i % 7);
        r.market = Some(Market {
            question: Some(format!(
                "Will outcome {} happen by the end of the year?",
                i % 6
            )),
            outcome: Some("Yes".into()),
            slug: Some(format!("will-outcome-{}-happen", i % 6)),
            event_slug: Some(format!("outcome-{}", i % 6)),
            condition_id: Some(hash(4_000 + i % 3)),
        });
        r
    }

    fn at(block: u64, log_index: u32) -> Position {
        Position::of(
            Cursor::new(block, log_index).unwrap(),
            &format!("0x{:064x}", block * 1000 + 7),
        )
    }

    fn round(rows: Vec<RoundRow>, retracts: Vec<RoundRow>) -> Round {
        Round {
            stream: Stream::Ledger,
            from: at(10, 0),
            through: at(20, 999_999),
            rewound: true,
            reorg_id: 4,
            watermark: Some(20),
            retracts,
            rows,
            pending: Vec::new(),
        }
    }

    /// The first part of a round of `rows` in parts of [`ROWS_PER_PART`] (the only one for up to
    /// that many rows).
    fn one_part(rows: Vec<RoundRow>) -> RoundPart {
        round(rows, vec![]).parts(ROWS_PER_PART).unwrap().remove(0)
    }

    #[test]
    fn a_round_splits_into_contiguous_parts_that_end_at_its_through() {
        let rows: Vec<_> = (11..16).map(|b| row(b, 2)).collect();
        let parts = round(rows.clone(), vec![row(9, 1)]).parts(2).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].from, at(10, 0));
        assert_eq!(parts[0].through, at(12, 2));
        assert_eq!(parts[1].from, at(12, 2));
        assert_eq!(parts[1].through, at(14, 2));
        assert_eq!(parts[2].from, at(14, 2));
        assert_eq!(parts[2].through, at(20, 999_999));
        assert!(parts[0].rewound && !parts[1].rewound && !parts[2].rewound);
        assert_eq!(parts[0].retracts.len(), 1);
        assert!(parts[1].retracts.is_empty() && parts[2].retracts.is_empty());
        let back: Vec<_> = parts.iter().flat_map(|p| p.rows.clone()).collect();
        assert_eq!(back, rows);
    }

    #[test]
    fn an_empty_round_is_one_part() {
        let parts = round(vec![], vec![]).parts(200).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(
            (parts[0].from, parts[0].through),
            (at(10, 0), at(20, 999_999))
        );
    }

    #[test]
    fn rows_that_fill_the_last_part_exactly_end_at_the_rounds_through() {
        let parts = round((11..15).map(|b| row(b, 0)).collect(), vec![])
            .parts(2)
            .unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].through, at(20, 999_999));
    }

    #[test]
    fn a_part_reads_back_what_it_wrote_under_a_stable_id() {
        let part = one_part(vec![row(11, 3)]);
        let frame = part.to_frame().unwrap();
        assert_eq!(RoundPart::from_body(&frame.body).unwrap(), part);
        let id = frame.id.to_string();
        assert_eq!(
            id,
            format!(
                "000000000020-999999:0x{}:all:ledger",
                &format!("{:064x}", 20_007)[..8]
            )
        );
        assert_eq!(id.parse::<FrameId>().unwrap(), frame.id);
        // The same range read again gives the same id.
        let again = one_part(vec![row(11, 3)]);
        assert_eq!(again.to_frame().unwrap().id, frame.id);
    }

    #[test]
    fn a_full_part_travels_compressed_and_reads_back_whole() {
        let rows: Vec<_> = (0..ROWS_PER_PART as u64).map(busy_row).collect();
        let part = one_part(rows);
        let json = serde_json::to_vec(&part).unwrap();
        let frame = part.to_frame().unwrap();
        println!(
            "200-row part: {} bytes of JSON, {} on the bus",
            json.len(),
            frame.body.len()
        );
        assert_eq!(frame.body[0], LZ4);
        assert!(
            frame.body.len() * 2 < json.len(),
            "compressed to under half"
        );
        assert_eq!(RoundPart::from_body(&frame.body).unwrap(), part);
    }

    #[test]
    fn a_small_part_stays_json_and_plain_json_still_reads() {
        let part = one_part(vec![row(11, 3)]);
        let frame = part.to_frame().unwrap();
        assert_eq!(frame.body[0], b'{');
        // A leader from before compression wrote every part as JSON.
        let rows: Vec<_> = (0..50).map(busy_row).collect();
        let big = one_part(rows);
        let json = serde_json::to_vec(&big).unwrap();
        assert!(json.len() > COMPRESS_ABOVE);
        assert_eq!(RoundPart::from_body(&json).unwrap(), big);
    }

    #[test]
    fn a_corrupt_compressed_body_is_refused_not_trusted() {
        let rows: Vec<_> = (0..50).map(busy_row).collect();
        let body = one_part(rows).to_frame().unwrap().body.to_vec();
        let refused = |b: &[u8]| matches!(RoundPart::from_body(b), Err(BusError::Invalid(_)));
        assert!(refused(&body[..3]), "no length");
        assert!(refused(&body[..body.len() / 2]), "truncated");
        let mut huge = body.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refused(&huge), "claims 4 GiB");
        let mut short = body.clone();
        short[1..5].copy_from_slice(&100u32.to_le_bytes());
        assert!(refused(&short), "claims less than it holds");
    }
}
