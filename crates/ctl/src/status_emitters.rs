//! Unlisted emitters in `pmwctl status`: contracts outside pmw-live's exchange list that
//! emitted Polymarket fill or match events (core's one query): the count and the most recently
//! seen, one line each, and a warning. Their logs are never delivered; an operator checks each
//! and lists a real exchange (docs/OPERATIONS.md, "Unlisted emitters").

use pmw_core::exit::ServiceError;
use pmw_core::pg::emitters::{open, warning, UnlistedEmitter};
use serde_json::{json, Value};

use crate::conn::db_error;

/// How many are listed in `status`.
const SHOWN: i64 = 20;

/// `{"count": n, "emitters": [...]}`, most recently seen first.
pub async fn collect(c: &tokio_postgres::Client) -> Result<Value, ServiceError> {
    let (list, total) = open(c, SHOWN).await.map_err(db_error)?;
    Ok(json!({ "count": total, "emitters": list }))
}

/// The warning, if any are unlisted.
pub fn warnings(v: &Value) -> Vec<String> {
    let list: Vec<UnlistedEmitter> =
        serde_json::from_value(v["emitters"].clone()).unwrap_or_default();
    warning(&list, v["count"].as_i64().unwrap_or(0))
        .into_iter()
        .collect()
}

/// `emitters      none unlisted`, or the count and one line per emitter.
pub fn text(v: &Value) -> Vec<String> {
    let count = v["count"].as_i64().unwrap_or(0);
    if count == 0 {
        return vec!["emitters      no unlisted emitter".into()];
    }
    let mut out = vec![format!(
        "emitters      {count} unlisted (fill/match events from contracts outside the exchange list; not delivered)"
    )];
    for e in v["emitters"].as_array().into_iter().flatten() {
        out.push(format!(
            "  {} blocks {}-{}, {} events at ingest, {} in audited blocks, first tx {}",
            e["address"].as_str().unwrap_or("?"),
            e["first_block"],
            e["last_block"],
            e["events"],
            e["audit_events"],
            e["first_tx"].as_str().unwrap_or("?"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_warning() {
        let none = json!({"count": 0, "emitters": []});
        assert!(warnings(&none).is_empty());
        assert_eq!(text(&none), ["emitters      no unlisted emitter"]);
        let one = json!({"count": 1, "emitters": [{
            "address": "0x7e57000000000000000000000000000000000e11", "first_block": 7,
            "last_block": 9, "events": 3, "audit_events": 0, "first_tx": "0xab",
            "first_seen_ms": 1, "last_seen_ms": 2}]});
        let w = warnings(&one);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("0x7e57000000000000000000000000000000000e11 (from block 7, 3 events"),
            "{}",
            w[0]
        );
        assert_eq!(
            text(&one)[1],
            "  0x7e57000000000000000000000000000000000e11 blocks 7-9, 3 events at ingest, 0 in audited blocks, first tx 0xab"
        );
    }
}
