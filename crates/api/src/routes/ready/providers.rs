//! The RPC providers check: pmw-live's provider quorum as its writer heartbeat reports it.
//! Reported in `warnings`, never gating: a single provider (its word alone makes blocks and
//! fills), or ingest waiting for a quorum of providers to agree on a block (the ingest check
//! gates on the lag that follows).

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
    let reasons = reasons(&q);
    if reasons.is_empty() {
        Check::pass(q)
    } else {
        Check::fail(reasons.join("; "), q)
    }
}

/// Why the quorum facts `q` warrant a warning (none when `null`).
fn reasons(q: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if q["providers"].as_u64() == Some(1) {
        out.push("one RPC provider: its word alone makes blocks and fills (configure three with a quorum of 2)".into());
    }
    let w = &q["waiting"];
    if !w.is_null() {
        out.push(format!(
            "ingest waits for a quorum of RPC providers on block {}: {} of {} agree (quorum {})",
            w["block"], w["agree"], w["asked"], q["quorum"]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_provider_and_a_wait_warn_a_quorum_does_not() {
        assert!(reasons(&Value::Null).is_empty());
        let ok = json!({"quorum": 2, "providers": 3, "waits": 0, "waiting": null});
        assert!(reasons(&ok).is_empty());
        let one = json!({"quorum": 1, "providers": 1, "waits": 0, "waiting": null});
        assert!(reasons(&one)[0].starts_with("one RPC provider"));
        let waiting = json!({"quorum": 2, "providers": 2, "waits": 3,
            "waiting": {"block": 9, "agree": 1, "asked": 2, "since_ms": 0}});
        assert_eq!(
            reasons(&waiting),
            ["ingest waits for a quorum of RPC providers on block 9: 1 of 2 agree (quorum 2)"]
        );
    }
}
