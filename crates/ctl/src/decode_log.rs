//! `pmwctl decode-log`: one `eth_getLogs` log object (JSON) on stdin → the trade pmw would push,
//! as JSON on stdout, or a clear error. Uses the production decoder and allowlist.

use pmw_core::trade::{self, Allowlist, Fill, RawLog};
use serde_json::{json, Value};

/// Decode one log given as JSON text. `Err` carries the operator-facing reason.
pub fn decode_text(input: &str) -> Result<Value, String> {
    let value: Value =
        serde_json::from_str(input.trim()).map_err(|e| format!("stdin is not JSON: {e}"))?;
    // Accept a bare log, or a JSON-RPC response / array holding exactly one log.
    let log_value = match &value {
        Value::Object(o) if o.contains_key("result") => o["result"].clone(),
        other => other.clone(),
    };
    let log_value = match log_value {
        Value::Array(mut a) if a.len() == 1 => a.remove(0),
        Value::Array(a) => return Err(format!("expected one log, got an array of {}", a.len())),
        v => v,
    };
    let raw = RawLog::from_rpc_json(&log_value).map_err(|e| e.to_string())?;
    match trade::decode(&raw, &Allowlist::polymarket()) {
        Ok(Some(fill)) => Ok(render(&fill)),
        Ok(None) => Err(
            "this log is not an OrderFilled (e.g. OrdersMatched): pmw pushes nothing for it".into(),
        ),
        Err(e) => Err(format!("not a trade pmw would push: {e}")),
    }
}

fn render(f: &Fill) -> Value {
    let price = f.price();
    json!({
        "exchange": f.exchange.to_lower_hex(),
        "exchange_version": f.version.number(),
        "order_hash": format!("0x{}", hex::encode(f.order_hash)),
        "maker": f.maker.to_lower_hex(),
        "taker": f.taker.to_lower_hex(),
        "side": f.side.as_str(),
        "token_id": f.token_id.to_string(),
        "shares": trade::format_units6(f.shares),
        "collateral": trade::format_units6(f.collateral),
        "price": price.text,
        "price_exact": price.exact,
        "fee": trade::format_units6(f.fee),
        "fee_asset": f.fee_asset.as_str(),
        "block_number": f.block_number,
        "log_index": f.log_index,
        "block_hash": format!("0x{}", hex::encode(f.block_hash)),
        "tx_hash": format!("0x{}", hex::encode(f.tx_hash)),
        "cursor": f.cursor().map(|c| c.to_string()).ok(),
    })
}
