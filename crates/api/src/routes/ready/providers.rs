//! The RPC providers check: pmw-live's provider quorum as its writer heartbeat reports it.
//! Reported in `warnings`, never gating: a single provider (its word alone makes blocks and
//! fills), or ingest waiting for a quorum of providers to agree on a block (the ingest check
//! gates on the lag that follows).

use pmw_core::heartbeat::rpc_quorum_warnings;
use serde_json::Value;

use super::probe::probe;
use super::Check;
use crate::AppState;

/// Pass with the quorum facts (`null` before live reports them); fail (a warning) with one
/// provider or while ingest waits for a quorum.
pub async fn providers(st: &AppState) -> Check {
    let row = match probe(st, include_str!("sql/live_quorum.sql"), &[]).await {
        Ok(r) => r,
        Err(e) => return Check::fail(format!("rpc providers unknown: {e}"), Value::Null),
    };
    let q: Value = row
        .and_then(|r| r.get::<_, Option<Value>>(0))
        .unwrap_or(Value::Null);
    let reasons = rpc_quorum_warnings(&q);
    if reasons.is_empty() {
        Check::pass(q)
    } else {
        Check::fail(reasons.join("; "), q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_provider_and_a_wait_warn_a_quorum_does_not() {
        assert!(rpc_quorum_warnings(&Value::Null).is_empty());
        let ok = json!({"quorum": 2, "providers": 3, "waits": 0, "waiting": null});
        assert!(rpc_quorum_warnings(&ok).is_empty());
        let one = json!({"quorum": 1, "providers": 1, "waits": 0, "waiting": null});
        assert!(rpc_quorum_warnings(&one)[0].starts_with("one RPC provider"));
        let waiting = json!({"quorum": 2, "providers": 2, "waits": 3,
            "waiting": {"block": 9, "agree": 1, "asked": 2, "since_ms": 0}});
        assert_eq!(
            rpc_quorum_warnings(&waiting),
            ["ingest waits for a quorum of RPC providers on block 9: 1 of 2 agree (quorum 2)"]
        );
    }
}
