//! The pending tier's messages (issue 43, docs/SETTLEMENT.md): a `pending` is a fill of a
//! settlement seen in the mempool, as its calldata names it, before any block mined it; a `void`
//! says a `pending` will not confirm, and why. A `pending` that confirms is followed by its
//! `trade`, which names it (`pending_id`).

use serde::{Deserialize, Serialize};

use super::Market;
use crate::filter::{trade_micro, Facts, Side};
use crate::trade::{price_of, U256};

/// A pending fill as its settlement's calldata names it. Amounts are exact decimal strings (6
/// decimals); the side and amounts are the maker order's, from the wallet's point of view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingFill {
    /// The wallet that owns the fill (its maker).
    pub wallet: String,
    pub tx_hash: String,
    pub exchange: String,
    /// The order's EIP-712 hash: its `trade` carries the same `order_hash`.
    pub order_hash: String,
    pub maker: String,
    pub taker: String,
    /// `BUY` or `SELL`, from the wallet's point of view.
    pub side: String,
    pub token_id: String,
    pub shares: String,
    pub collateral: String,
    /// `collateral / shares`, as the calldata's amounts say.
    pub price: String,
}

impl PendingFill {
    /// The fill of a pending row: `making` is what the maker order gives (collateral for a BUY,
    /// shares for a SELL), `taking` what it receives.
    pub fn of_calldata(fill: CalldataFill<'_>) -> PendingFill {
        let buy = fill.side == 0;
        let (shares, collateral) = match buy {
            true => (fill.taking, fill.making),
            false => (fill.making, fill.taking),
        };
        let price = price_of(
            U256::from(trade_micro(collateral)),
            U256::from(trade_micro(shares)),
        )
        .map_or_else(|| "0".to_string(), |p| p.text);
        PendingFill {
            wallet: fill.maker.to_string(),
            tx_hash: fill.tx_hash.to_string(),
            exchange: fill.exchange.to_string(),
            order_hash: fill.order_hash.to_string(),
            maker: fill.maker.to_string(),
            taker: fill.taker.to_string(),
            side: if buy { "BUY" } else { "SELL" }.to_string(),
            token_id: fill.token_id.to_string(),
            shares: shares.to_string(),
            collateral: collateral.to_string(),
            price,
        }
    }

    /// What subscription filters look at, as for the fill's `trade`.
    pub fn facts(&self, market: Option<&Market>) -> Facts {
        Facts {
            side: if self.side == "BUY" {
                Side::Buy
            } else {
                Side::Sell
            },
            shares: trade_micro(&self.shares),
            collateral: trade_micro(&self.collateral),
            token_id: self.token_id.clone(),
            condition_id: market
                .and_then(|m| m.condition_id.as_deref())
                .map(str::to_ascii_lowercase),
        }
    }
}

/// A pending fill's stored columns (`pending_fills`, migration 0023), borrowed.
#[derive(Debug, Clone, Copy)]
pub struct CalldataFill<'a> {
    pub tx_hash: &'a str,
    pub exchange: &'a str,
    pub order_hash: &'a str,
    pub maker: &'a str,
    pub taker: &'a str,
    /// 0 BUY, 1 SELL.
    pub side: i16,
    pub token_id: &'a str,
    pub making: &'a str,
    pub taking: &'a str,
}

/// A `pending`: the body of a WebSocket frame (with `type` and `t_push_ms` in front).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingMessage {
    /// The pending fill's id: its `trade` carries it as `pending_id`, a `void` names it.
    pub pending_id: i64,
    /// When pmw-live first saw the settlement in a provider's pool (ms since the epoch).
    pub t_seen_ms: i64,
    pub fill: PendingFill,
    /// The market's names, when the background resolver has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub market: Option<Market>,
}

impl PendingMessage {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a pending message serialises")
    }
}

/// A `void`: the pending fill `pending_id` will not confirm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VoidMessage {
    pub pending_id: i64,
    /// `reverted` (mined with status 0), `replaced` (another transaction of the same sender
    /// and nonce mined), `dropped` (gone from every provider's pool, not mined) or `expired`
    /// (not mined within the bound of blocks).
    pub reason: String,
    /// The fill's owner, settlement transaction and order, as in its `pending`.
    pub wallet: String,
    pub tx_hash: String,
    pub order_hash: String,
}

impl VoidMessage {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a void message serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_fill_takes_shares_and_collateral_by_side() {
        let call = CalldataFill {
            tx_hash: "0xaa",
            exchange: "0xee",
            order_hash: "0x01",
            maker: "0x11",
            taker: "0x22",
            side: 0,
            token_id: "7",
            making: "5.2",
            taking: "10",
        };
        let buy = PendingFill::of_calldata(call);
        assert_eq!((buy.side.as_str(), buy.shares.as_str()), ("BUY", "10"));
        assert_eq!(
            (buy.collateral.as_str(), buy.price.as_str()),
            ("5.2", "0.52")
        );
        let sell = PendingFill::of_calldata(CalldataFill { side: 1, ..call });
        assert_eq!(
            (sell.shares.as_str(), sell.collateral.as_str()),
            ("5.2", "10")
        );
        assert_eq!(sell.facts(None).shares, 5_200_000);
    }
}
