//! The `OrderFilled` decoder: [`decode`] turns one allowlisted exchange log into a [`Fill`]
//! (V1 and V2 ABIs), or says precisely why it will not. It never guesses and never panics.

use std::fmt;

use primitive_types::U256;

use super::exchange::AbiVersion;
use super::raw_log::RawLog;
use super::{Allowlist, FeeAsset, Fill, Side};
use crate::types::Address;

/// Where a log is: enough for an operator to find it on an explorer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LogRef {
    pub block_number: u64,
    pub log_index: u32,
    pub tx_hash: [u8; 32],
}

impl LogRef {
    pub fn of(log: &RawLog) -> LogRef {
        LogRef {
            block_number: log.block_number,
            log_index: log.log_index,
            tx_hash: log.tx_hash,
        }
    }
}

impl fmt::Display for LogRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {} log {} (tx 0x{})",
            self.block_number,
            self.log_index,
            hex::encode(self.tx_hash)
        )
    }
}

/// Why a log from the exchange feed was not turned into a fill. Each is counted and logged by
/// the caller; none is fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "log at {at} was emitted by {emitter}, which is not an allowlisted exchange; ignored \
         (anyone can emit a log with the exchange's topics)"
    )]
    UnknownEmitter { emitter: Address, at: LogRef },
    #[error(
        "log at {at}: {emitter} is a {emitter_version} exchange but the log carries the \
         {topic_version} OrderFilled topic; ignored"
    )]
    VersionMismatch {
        emitter: Address,
        emitter_version: AbiVersion,
        topic_version: AbiVersion,
        at: LogRef,
    },
    #[error(
        "{version} OrderFilled at {at} from {emitter} has {got} topics, expected 4 \
         (signature, orderHash, maker, taker)"
    )]
    TopicCount {
        emitter: Address,
        version: AbiVersion,
        got: usize,
        at: LogRef,
    },
    #[error(
        "{version} OrderFilled at {at} from {emitter} has {got} data bytes, expected {expected} \
         ({} words of 32 bytes)", .expected / 32
    )]
    DataLength {
        emitter: Address,
        version: AbiVersion,
        got: usize,
        expected: usize,
        at: LogRef,
    },
    #[error(
        "OrderFilled at {at} from {emitter}: the {field} topic 0x{} has non-zero upper 12 bytes, \
         so it is not an address", hex::encode(.topic)
    )]
    NotAnAddress {
        emitter: Address,
        field: &'static str,
        topic: [u8; 32],
        at: LogRef,
    },
    #[error(
        "V2 OrderFilled at {at} from {emitter}: side is {value}, expected 0 (BUY) or 1 (SELL)"
    )]
    BadSide {
        emitter: Address,
        value: U256,
        at: LogRef,
    },
    #[error(
        "V1 OrderFilled at {at} from {emitter}: makerAssetId {maker_asset_id} and takerAssetId \
         {taker_asset_id}; exactly one of them must be 0 (the collateral side)"
    )]
    V1AssetIds {
        emitter: Address,
        /// Decimal, as in the message (kept as text so the error stays small).
        maker_asset_id: String,
        taker_asset_id: String,
        at: LogRef,
    },
    #[error("V2 OrderFilled at {at} from {emitter}: tokenId is 0, which is no outcome token")]
    ZeroTokenId { emitter: Address, at: LogRef },
    #[error(
        "{version} OrderFilled at {at} from {emitter} fills zero shares (collateral {collateral} \
         base units); no price exists, ignored"
    )]
    ZeroShares {
        emitter: Address,
        version: AbiVersion,
        collateral: U256,
        at: LogRef,
    },
}

/// Decode one log from the exchange feed.
///
/// - `Err(UnknownEmitter)` for any log whose emitter is not in `allow`.
/// - `Ok(None)` for an allowlisted exchange's logs that are not `OrderFilled`
///   (`OrdersMatched`, `FeeCharged`, anonymous logs, …).
/// - `Ok(Some(fill))` for a well-formed `OrderFilled` of the emitter's ABI version.
/// - `Err(..)` for an `OrderFilled` that is malformed or carries the other version's topic.
pub fn decode(log: &RawLog, allow: &Allowlist) -> Result<Option<Fill>, DecodeError> {
    let at = LogRef::of(log);
    let emitter = log.address;
    let version = allow
        .version_of(&emitter)
        .ok_or(DecodeError::UnknownEmitter { emitter, at })?;
    let Some(topic_version) = log
        .topics
        .first()
        .and_then(AbiVersion::of_order_filled_topic)
    else {
        return Ok(None);
    };
    if topic_version != version {
        return Err(DecodeError::VersionMismatch {
            emitter,
            emitter_version: version,
            topic_version,
            at,
        });
    }
    let [_, order_hash, maker_topic, taker_topic] = log.topics.as_slice() else {
        return Err(DecodeError::TopicCount {
            emitter,
            version,
            got: log.topics.len(),
            at,
        });
    };
    let expected = version.order_filled_data_words() * 32;
    if log.data.len() != expected {
        return Err(DecodeError::DataLength {
            emitter,
            version,
            got: log.data.len(),
            expected,
            at,
        });
    }
    let maker = topic_address(maker_topic, "maker", emitter, at)?;
    let taker = topic_address(taker_topic, "taker", emitter, at)?;
    // The length check above makes every chunk exactly 32 bytes.
    let words: Vec<U256> = log
        .data
        .chunks_exact(32)
        .map(U256::from_big_endian)
        .collect();

    let legs = match version {
        AbiVersion::V1 => v1_legs(&words, emitter, at)?,
        AbiVersion::V2 => v2_legs(&words, emitter, at)?,
    };
    if legs.shares.is_zero() {
        return Err(DecodeError::ZeroShares {
            emitter,
            version,
            collateral: legs.collateral,
            at,
        });
    }
    Ok(Some(Fill {
        exchange: emitter,
        version,
        order_hash: *order_hash,
        maker,
        taker,
        side: legs.side,
        token_id: legs.token_id,
        shares: legs.shares,
        collateral: legs.collateral,
        fee: legs.fee,
        fee_asset: legs.fee_asset,
        block_number: log.block_number,
        log_index: log.log_index,
        block_hash: log.block_hash,
        tx_hash: log.tx_hash,
    }))
}

/// The economic content of a fill, before its position is attached.
struct Legs {
    side: Side,
    token_id: U256,
    shares: U256,
    collateral: U256,
    fee: U256,
    fee_asset: FeeAsset,
}

fn word(words: &[U256], i: usize) -> U256 {
    words.get(i).copied().unwrap_or_default()
}

/// V1 data: makerAssetId, takerAssetId, makerAmountFilled, takerAmountFilled, fee.
/// Asset id 0 is collateral: `makerAssetId == 0` means the maker BUYs `takerAssetId`.
fn v1_legs(words: &[U256], emitter: Address, at: LogRef) -> Result<Legs, DecodeError> {
    let (maker_asset_id, taker_asset_id) = (word(words, 0), word(words, 1));
    let (maker_amount, taker_amount, fee) = (word(words, 2), word(words, 3), word(words, 4));
    match (maker_asset_id.is_zero(), taker_asset_id.is_zero()) {
        (true, false) => Ok(Legs {
            side: Side::Buy,
            token_id: taker_asset_id,
            shares: taker_amount,
            collateral: maker_amount,
            fee,
            fee_asset: FeeAsset::Shares,
        }),
        (false, true) => Ok(Legs {
            side: Side::Sell,
            token_id: maker_asset_id,
            shares: maker_amount,
            collateral: taker_amount,
            fee,
            fee_asset: FeeAsset::Collateral,
        }),
        _ => Err(DecodeError::V1AssetIds {
            emitter,
            maker_asset_id: maker_asset_id.to_string(),
            taker_asset_id: taker_asset_id.to_string(),
            at,
        }),
    }
}

/// V2 data: side, tokenId, makerAmountFilled, takerAmountFilled, fee, builder, metadata.
fn v2_legs(words: &[U256], emitter: Address, at: LogRef) -> Result<Legs, DecodeError> {
    let side_word = word(words, 0);
    let side = if side_word.is_zero() {
        Side::Buy
    } else if side_word == U256::one() {
        Side::Sell
    } else {
        return Err(DecodeError::BadSide {
            emitter,
            value: side_word,
            at,
        });
    };
    let token_id = word(words, 1);
    if token_id.is_zero() {
        return Err(DecodeError::ZeroTokenId { emitter, at });
    }
    let (maker_amount, taker_amount) = (word(words, 2), word(words, 3));
    let (collateral, shares) = match side {
        Side::Buy => (maker_amount, taker_amount),
        Side::Sell => (taker_amount, maker_amount),
    };
    Ok(Legs {
        side,
        token_id,
        shares,
        collateral,
        fee: word(words, 4),
        fee_asset: FeeAsset::Collateral,
    })
}

/// An indexed `address` topic: 12 zero bytes, then the 20 address bytes.
fn topic_address(
    topic: &[u8; 32],
    field: &'static str,
    emitter: Address,
    at: LogRef,
) -> Result<Address, DecodeError> {
    let (high, low) = topic.split_at(12);
    match Address::from_slice(low) {
        Some(address) if high.iter().all(|b| *b == 0) => Ok(address),
        _ => Err(DecodeError::NotAnAddress {
            emitter,
            field,
            topic: *topic,
            at,
        }),
    }
}
