//! Messages sent to subscribers (WebSocket frames and webhook bodies): `hello`, `trade`,
//! `retract`, `heartbeat`. Every trade carries its cursor, `t_detect_ms` and `t_push_ms`.

use pmw_core::store::TradeRow;
use serde::Serialize;
use serde_json::{json, Value};

/// Market metadata, when the background resolver has it cached.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Market {
    pub question: Option<String>,
    pub outcome: Option<String>,
    pub slug: Option<String>,
    pub condition_id: Option<String>,
}

/// The `trade` object of a message (without `t_push_ms`, stamped at send time).
pub fn trade_body(row: &TradeRow, market: Option<&Market>) -> Value {
    json!({
        "cursor": row.cursor().to_string(),
        "t_detect_ms": row.t_detect_ms,
        "backfilled": row.backfilled == 1,
        "trade": {
            "wallet": row.maker,
            "block_number": row.block_number,
            "log_index": row.log_index,
            "block_hash": row.block_hash,
            "tx_hash": row.tx_hash,
            "block_time_ms": row.block_time_ms,
            "exchange": row.exchange,
            "exchange_version": row.exchange_version,
            "order_hash": row.order_hash,
            "maker": row.maker,
            "taker": row.taker,
            "side": if row.side == 0 { "BUY" } else { "SELL" },
            "token_id": row.token_id,
            "shares": row.shares,
            "collateral": row.collateral,
            "price": row.price,
            "fee": row.fee,
            "fee_asset": row.fee_asset,
        },
        "market": market,
    })
}

/// A message of `kind` (`trade` or `retract`) from a pre-rendered body, stamped `t_push_ms` now.
/// The body's fields are spliced after `type` and `t_push_ms` without re-serialising it.
pub fn stamp(kind: &str, body_json: &str, t_push_ms: i64) -> String {
    debug_assert!(body_json.starts_with('{'));
    let rest = &body_json[1..];
    if rest.trim_start().starts_with('}') {
        format!("{{\"type\":\"{kind}\",\"t_push_ms\":{t_push_ms}}}")
    } else {
        format!("{{\"type\":\"{kind}\",\"t_push_ms\":{t_push_ms},{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_produces_valid_json_with_type_first() {
        let s = stamp(
            "trade",
            r#"{"cursor":"000000000001-000002","t_detect_ms":5}"#,
            9,
        );
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["type"], "trade");
        assert_eq!(v["t_push_ms"], 9);
        assert_eq!(v["cursor"], "000000000001-000002");
        assert_eq!(v["t_detect_ms"], 5);
        let empty: Value = serde_json::from_str(&stamp("retract", "{}", 1)).unwrap();
        assert_eq!(empty["type"], "retract");
    }
}
