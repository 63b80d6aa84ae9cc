//! What the simulator emitted: one [`Emitted`] record per `OrderFilled` log, decoded back from
//! the transaction receipt (so it states what is on chain, with block, log index and tx), and
//! the JSON-lines report file those records are appended to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use anyhow::{bail, ensure, Context};
use pmw_core::Address;
use serde::{Deserialize, Serialize};

use crate::abi::{word, word_address, word_u64};
use crate::contracts::Exchange;
use crate::plan::fee_asset;
use crate::rpc::Log;
use crate::types::{FeeAsset, Role, Side, TokenId, Version, B256};

/// One fill the simulator put on chain (one `OrderFilled` log).
///
/// A wallet's trades are the records whose `maker` is that wallet; `side` is the maker's side.
/// Trade identity is `(block_number, log_index)` on the canonical chain; after a reorg the
/// records of orphaned blocks stay in the list with `orphaned = true`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Emitted {
    pub block_number: u64,
    pub block_hash: B256,
    pub log_index: u64,
    pub tx_hash: B256,
    pub tx_index: u64,
    /// The emitting exchange contract.
    pub exchange: Address,
    pub version: Version,
    pub neg_risk: bool,
    pub order_hash: B256,
    /// The order's owner: the wallet whose trade this is.
    pub maker: Address,
    /// The counterparty: the aggressor for a maker-order fill, the exchange for the taker
    /// order's fill.
    pub taker: Address,
    pub role: Role,
    /// The maker's side.
    pub side: Side,
    pub token_id: TokenId,
    /// Outcome tokens, 6 decimals.
    pub shares: u64,
    /// Collateral, 6 decimals. Price = collateral / shares, exactly.
    pub collateral: u64,
    pub fee: u64,
    pub fee_asset: FeeAsset,
    /// The simulator's match sequence number (None for fills it did not plan itself).
    pub match_id: Option<u64>,
    /// Set when the block holding this log was reorged out.
    pub orphaned: bool,
}

impl Emitted {
    /// `(block_number, log_index)`, pmw's trade identity.
    pub fn key(&self) -> (u64, u64) {
        (self.block_number, self.log_index)
    }
}

/// A log the exchange allowlist and topics say is an `OrderFilled`, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedFill {
    pub exchange: Exchange,
    pub order_hash: B256,
    pub maker: Address,
    pub taker: Address,
    pub role: Role,
    pub side: Side,
    pub token_id: TokenId,
    pub shares: u64,
    pub collateral: u64,
    pub fee: u64,
    pub fee_asset: FeeAsset,
    pub builder: B256,
    pub metadata: B256,
}

/// The maker's side and the outcome token from an `OrderFilled`'s first two data words: V1
/// states the two assets (collateral is asset 0: a zero maker asset is a BUY of the taker
/// asset), V2 the side (0 BUY, 1 SELL) and the token.
fn side_and_token(
    version: Version,
    w0: &[u8; 32],
    w1: &[u8; 32],
) -> anyhow::Result<(Side, TokenId)> {
    match version {
        Version::V1 => {
            let maker_asset = TokenId::from_be_bytes(w0);
            let taker_asset = TokenId::from_be_bytes(w1);
            if maker_asset.is_zero() {
                Ok((Side::Buy, taker_asset))
            } else {
                Ok((Side::Sell, maker_asset))
            }
        }
        Version::V2 => {
            let side = match word_u64(w0) {
                Some(0) => Side::Buy,
                Some(1) => Side::Sell,
                other => bail!("OrderFilled V2 side {other:?}"),
            };
            Ok((side, TokenId::from_be_bytes(w1)))
        }
    }
}

/// Decodes `log` if it is an `OrderFilled` of one of the four exchanges (by address and the
/// version's topic0). `Ok(None)` for any other log; an error when the topic matches but the
/// layout does not (wrong topic count, short data, out-of-range words).
pub fn decode_order_filled(log: &Log) -> anyhow::Result<Option<DecodedFill>> {
    let Some(exchange) = Exchange::at(&log.address) else {
        return Ok(None);
    };
    let version = exchange.version;
    if log.topics.first() != Some(&version.order_filled_topic()) {
        return Ok(None);
    }
    ensure!(
        log.topics.len() == 4,
        "OrderFilled with {} topics",
        log.topics.len()
    );
    let data = &log.data.0;
    let words = version.order_filled_data_words();
    ensure!(
        data.len() == 32 * words,
        "OrderFilled {version} data is {} bytes",
        data.len()
    );
    let maker = word_address(&log.topics[2].0).context("maker topic is not an address")?;
    let taker = word_address(&log.topics[3].0).context("taker topic is not an address")?;
    let w = |i: usize| word(data, i).expect("length checked");
    let amount =
        |i: usize| word_u64(w(i)).with_context(|| format!("OrderFilled word {i} exceeds u64"));
    let (side, token_id) = side_and_token(version, w(0), w(1))?;
    let (making, taking, fee) = (amount(2)?, amount(3)?, amount(4)?);
    let (builder, metadata) = match version {
        Version::V1 => (B256::ZERO, B256::ZERO),
        Version::V2 => (B256(*w(5)), B256(*w(6))),
    };
    let (shares, collateral) = match side {
        Side::Buy => (taking, making),
        Side::Sell => (making, taking),
    };
    Ok(Some(DecodedFill {
        exchange,
        order_hash: log.topics[1],
        maker,
        taker,
        role: if taker == exchange.address {
            Role::Taker
        } else {
            Role::Maker
        },
        side,
        token_id,
        shares,
        collateral,
        fee,
        fee_asset: fee_asset(version, side),
        builder,
        metadata,
    }))
}

impl DecodedFill {
    /// The record of this fill at `log`'s position.
    pub fn record(&self, log: &Log, match_id: Option<u64>) -> Emitted {
        Emitted {
            block_number: log.block_number.0,
            block_hash: log.block_hash,
            log_index: log.log_index.0,
            tx_hash: log.transaction_hash,
            tx_index: log.transaction_index.0,
            exchange: self.exchange.address,
            version: self.exchange.version,
            neg_risk: self.exchange.neg_risk,
            order_hash: self.order_hash,
            maker: self.maker,
            taker: self.taker,
            role: self.role,
            side: self.side,
            token_id: self.token_id,
            shares: self.shares,
            collateral: self.collateral,
            fee: self.fee,
            fee_asset: self.fee_asset,
            match_id,
            orphaned: false,
        }
    }
}

/// Appends records to a JSON-lines file, one [`Emitted`] object per line. A record that is
/// orphaned by a reorg is appended again with `"orphaned": true`: a reader keeps the last line
/// per `(block_hash, log_index)`.
#[derive(Debug)]
pub struct Report {
    file: File,
}

impl Report {
    pub fn append_to(path: &Path) -> anyhow::Result<Report> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("open report {}", path.display()))?;
        Ok(Report { file })
    }

    pub fn write(&mut self, records: &[Emitted]) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        for r in records {
            serde_json::to_writer(&mut buf, r)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf).context("write report")?;
        self.file.flush().context("flush report")
    }
}

/// Reads a report file back, keeping the last line per `(block_hash, log_index)`, in file order
/// of first appearance.
pub fn read_report(path: &Path) -> anyhow::Result<Vec<Emitted>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut out: Vec<Emitted> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let r: Emitted =
            serde_json::from_str(line).with_context(|| format!("report line {}", n + 1))?;
        match index.get(&(r.block_hash, r.log_index)) {
            Some(&i) => out[i] = r,
            None => {
                index.insert((r.block_hash, r.log_index), out.len());
                out.push(r);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::{Bytes, Quantity};

    fn log(exchange: Exchange, topics: Vec<B256>, data: Vec<u8>) -> Log {
        Log {
            address: exchange.address,
            topics,
            data: Bytes(data),
            block_number: Quantity(7),
            block_hash: B256([7; 32]),
            transaction_hash: B256([8; 32]),
            transaction_index: Quantity(0),
            log_index: Quantity(3),
            removed: false,
        }
    }

    fn addr_topic(a: &Address) -> B256 {
        B256(crate::abi::address_word(a))
    }

    #[test]
    fn decodes_v1_buy_and_rejects_bad_layouts() {
        let ex = Exchange::of(Version::V1, false);
        let maker = Address([1; 20]);
        let mut data = vec![0u8; 5 * 32];
        data[63] = 9; // takerAssetId = 9: maker BUYs token 9
        data[95] = 53; // makerAmountFilled (collateral)
        data[127] = 100; // takerAmountFilled (shares)
        let topics = vec![
            Version::V1.order_filled_topic(),
            B256([5; 32]),
            addr_topic(&maker),
            addr_topic(&ex.address),
        ];
        let d = decode_order_filled(&log(ex, topics.clone(), data.clone()))
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.side, d.role, d.shares, d.collateral),
            (Side::Buy, Role::Taker, 100, 53)
        );
        assert_eq!(d.token_id.to_string(), "9");
        assert_eq!(d.fee_asset, FeeAsset::Shares);
        assert!(decode_order_filled(&log(ex, topics[..3].to_vec(), data.clone())).is_err());
        assert!(decode_order_filled(&log(ex, topics.clone(), data[..128].to_vec())).is_err());
        let v2 = Exchange::of(Version::V2, false);
        assert!(
            decode_order_filled(&log(v2, topics, data))
                .unwrap()
                .is_none(),
            "V1 topic at a V2 exchange"
        );
    }

    fn word_of(v: u64) -> [u8; 32] {
        let mut w = [0u8; 32];
        w[24..].copy_from_slice(&v.to_be_bytes());
        w
    }

    #[test]
    fn v1_sides_follow_which_asset_is_collateral() {
        let (zero, token) = (word_of(0), word_of(77));
        assert_eq!(
            side_and_token(Version::V1, &zero, &token).unwrap(),
            (Side::Buy, TokenId::from_be_bytes(&token))
        );
        assert_eq!(
            side_and_token(Version::V1, &token, &zero).unwrap(),
            (Side::Sell, TokenId::from_be_bytes(&token))
        );
    }

    #[test]
    fn v2_states_its_side_and_refuses_any_other_value() {
        let token = word_of(5);
        assert_eq!(
            side_and_token(Version::V2, &word_of(0), &token).unwrap().0,
            Side::Buy
        );
        assert_eq!(
            side_and_token(Version::V2, &word_of(1), &token).unwrap(),
            (Side::Sell, TokenId::from_be_bytes(&token))
        );
        let err = side_and_token(Version::V2, &word_of(2), &token).unwrap_err();
        assert_eq!(err.to_string(), "OrderFilled V2 side Some(2)");
    }
}
