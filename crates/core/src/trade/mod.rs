//! Polymarket trades from chain logs: exchange knowledge and allowlist ([`exchange`]), the raw
//! log input ([`raw_log`]), the `OrderFilled` decoder ([`decode()`]) and exact amount/price
//! rendering ([`amount`]), and settlement calldata seen before it is mined ([`settle`]).
//! A wallet's trades are the [`Fill`]s whose `maker` is that wallet.

pub mod amount;
pub mod decode;
pub mod exchange;
pub mod raw_log;
pub mod settle;

#[cfg(test)]
mod tests;

pub use primitive_types::U256;
use serde::{Deserialize, Serialize};

pub use amount::{format_units6, price_of, Price};
pub use decode::{decode, DecodeError, LogRef};
pub use exchange::{AbiVersion, Allowlist, AllowlistEntry, AllowlistError, Exchange};
pub use raw_log::{RawLog, RawLogError};

use crate::types::{Address, Cursor, CursorError};

/// The side of a fill from its maker's point of view (the owner of the fill).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Side {
    /// The maker paid collateral and received outcome shares.
    Buy,
    /// The maker gave outcome shares and received collateral.
    Sell,
}

impl Side {
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Buy => "BUY",
            Side::Sell => "SELL",
        }
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the fee of a fill is denominated in (both have 6 decimals).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeeAsset {
    /// Collateral (USDC.e on V1, pUSD on V2): V1 SELL and every V2 fill.
    Collateral,
    /// Outcome shares of the fill's token: V1 BUY.
    Shares,
}

impl FeeAsset {
    pub const fn as_str(self) -> &'static str {
        match self {
            FeeAsset::Collateral => "collateral",
            FeeAsset::Shares => "shares",
        }
    }
}

/// One decoded `OrderFilled`: one fill of one order, owned by `maker`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Fill {
    /// The exchange contract that emitted the log.
    pub exchange: Address,
    pub version: AbiVersion,
    pub order_hash: [u8; 32],
    /// The owner of the order that was filled; `side` is this wallet's side.
    pub maker: Address,
    /// The counterparty, the exchange (for the taker-order fill) or the operator.
    pub taker: Address,
    pub side: Side,
    /// ERC-1155 position id of the outcome token traded.
    pub token_id: U256,
    /// Outcome shares, base units (6 decimals). Never zero for a decoded fill.
    pub shares: U256,
    /// Collateral, base units (6 decimals).
    pub collateral: U256,
    /// Fee, base units (6 decimals) of `fee_asset`.
    pub fee: U256,
    pub fee_asset: FeeAsset,
    pub block_number: u64,
    pub log_index: u32,
    pub block_hash: [u8; 32],
    pub tx_hash: [u8; 32],
}

impl Fill {
    /// Collateral per share, exact or rounded half-up at 18 digits (see [`price_of`]).
    /// [`decode()`] never yields zero shares; a hand-built `Fill` with zero shares gets
    /// `Price { text: "0", exact: false }` rather than a panic.
    pub fn price(&self) -> Price {
        price_of(self.collateral, self.shares).unwrap_or_else(|| Price {
            text: "0".to_string(),
            exact: false,
        })
    }

    /// The ledger position `(block_number, log_index)`; fails only beyond the cursor's range.
    pub fn cursor(&self) -> Result<Cursor, CursorError> {
        Cursor::new(self.block_number, self.log_index)
    }

    /// Where the fill's log is, for messages.
    pub fn log_ref(&self) -> LogRef {
        LogRef {
            block_number: self.block_number,
            log_index: self.log_index,
            tx_hash: self.tx_hash,
        }
    }
}
