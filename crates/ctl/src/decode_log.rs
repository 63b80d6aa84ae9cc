//! `pmwctl decode-log`: one `eth_getLogs` log object (JSON) on stdin → the trade pmw would push,
//! as JSON on stdout, or a clear error. Uses the production decoder, allowlist and stored form,
//! and prints the `trade` object of the pushed message ([`pmw_core::message::Trade`]) plus the
//! `cursor` and whether the price is exact. `block_time_ms` comes from the log's
//! `blockTimestamp` when the node includes it, else it is `null`.

use pmw_core::ch::TradeRow;
use pmw_core::message::Trade;
use pmw_core::trade::{self, Allowlist, Fill, RawLog};
use serde_json::Value;

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
    let block_time_ms = log_value["blockTimestamp"]
        .as_str()
        .and_then(|t| i64::from_str_radix(t.trim_start_matches("0x"), 16).ok())
        .map(|secs| secs * 1_000);
    match trade::decode(&raw, &Allowlist::polymarket()) {
        Ok(Some(fill)) => Ok(render(&fill, block_time_ms)),
        Ok(None) => Err(
            "this log is not an OrderFilled (e.g. OrdersMatched): pmw pushes nothing for it".into(),
        ),
        Err(e) => Err(format!("not a trade pmw would push: {e}")),
    }
}

fn render(f: &Fill, block_time_ms: Option<i64>) -> Value {
    let row = TradeRow::from_fill(f, block_time_ms.unwrap_or_default(), 0, false, 0);
    let mut v = serde_json::to_value(Trade::from_row(&row)).expect("a trade serialises");
    v["block_time_ms"] = block_time_ms.into();
    v["cursor"] = f.cursor().map(|c| c.to_string()).ok().into();
    v["price_exact"] = f.price().exact.into();
    v
}
