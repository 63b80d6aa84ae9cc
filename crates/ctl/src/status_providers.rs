//! The RPC providers' part of `pmwctl status`, from the live leader's heartbeat: per provider
//! its standing (healthy, or demoted: failing, no subscription, lagging), whether it leads, its
//! head and how far behind the best, heads won of those announced, lag behind the winner,
//! errors, "not found" answers, hedges and demotions; a warning for each demoted provider. The
//! quorum (how many must agree on a block): a warning when one provider alone makes blocks, and
//! while ingest waits for a quorum on a block.

use pmw_core::exit::ServiceError;
use serde_json::{json, Value};

use crate::conn::{age, db_error};

/// The providers as JSON (`null` when no live heartbeat reports them).
pub async fn collect(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let row = c
        .query_opt(include_str!("sql/live_providers.sql"), &[])
        .await
        .map_err(db_error)?;
    Ok(row.map_or(Value::Null, |r| {
        json!({
            "beat_age_ms": now - r.get::<_, i64>(0),
            "list": r.get::<_, Value>(1),
            "quorum": r.get::<_, Option<Value>>(2).unwrap_or(Value::Null),
        })
    }))
}

fn list(p: &Value) -> &[Value] {
    p["list"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// One warning per demoted provider, one for a single provider, one while ingest waits for a
/// quorum.
pub fn warnings(p: &Value) -> Vec<String> {
    let mut out: Vec<String> = list(p)
        .iter()
        .filter(|r| r["standing"] != "healthy")
        .map(|r| {
            format!(
                "RPC provider {} is demoted ({}): ingest uses the others (README: several RPC providers)",
                r["name"].as_str().unwrap_or("?"),
                r["standing"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    out.extend(pmw_core::heartbeat::rpc_quorum_warnings(&p["quorum"]));
    out
}

fn or_dash(v: &Value) -> String {
    v.as_i64().map_or("-".into(), |n| n.to_string())
}

/// The text lines.
pub fn text(p: &Value) -> Vec<String> {
    if p.is_null() {
        return vec!["providers     unknown (no live heartbeat reports them)".into()];
    }
    let rows = list(p);
    let leader = rows
        .iter()
        .find(|r| r["leader"] == true)
        .and_then(|r| r["name"].as_str())
        .unwrap_or("none");
    let mut out = vec![format!(
        "providers     {} (as live saw them {} ago), leader {leader}",
        rows.len(),
        p["beat_age_ms"].as_i64().map_or("-".into(), age),
    )];
    let q = &p["quorum"];
    if let Some(n) = q["quorum"].as_u64() {
        out.push(format!(
            "  quorum      {n} of {} must agree on a block, {} waits",
            q["providers"], q["waits"]
        ));
    }
    for r in rows {
        out.push(format!(
            "  {:<11} {}, head {} ({} behind), won {} of {} heads, lag p50/p95 {}/{} ms, {} errors, {} not found, {} hedges, {} demotions",
            r["name"].as_str().unwrap_or("?"),
            r["standing"].as_str().unwrap_or("?"),
            r["head"],
            r["behind_blocks"],
            r["won"],
            r["heads"],
            or_dash(&r["lag_p50_ms"]),
            or_dash(&r["lag_p95_ms"]),
            r["errors"],
            r["not_found"],
            r["hedges"],
            r["demotions"],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        json!({"beat_age_ms": 1_500, "list": [
            {"name": "a", "standing": "healthy", "leader": true, "head": 120, "behind_blocks": 0,
             "heads": 40, "won": 39, "lag_p50_ms": 3, "lag_p95_ms": 9, "errors": 0, "not_found": 0,
             "hedges": 1, "demotions": 0},
            {"name": "b", "standing": "lagging", "leader": false, "head": 110, "behind_blocks": 10,
             "heads": 38, "won": 1, "lag_p50_ms": null, "lag_p95_ms": null, "errors": 2,
             "not_found": 5, "hedges": 0, "demotions": 1},
        ]})
    }

    #[test]
    fn one_line_per_provider_after_the_leader() {
        let lines = text(&sample());
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("providers     2 (as live saw them "),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("leader a"), "{}", lines[0]);
        assert_eq!(
            lines[2],
            "  b           lagging, head 110 (10 behind), won 1 of 38 heads, lag p50/p95 -/- ms, 2 errors, 5 not found, 0 hedges, 1 demotions"
        );
    }

    #[test]
    fn demoted_providers_warn_and_no_heartbeat_says_unknown() {
        let w = warnings(&sample());
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("RPC provider b is demoted (lagging)"),
            "{}",
            w[0]
        );
        assert!(warnings(&Value::Null).is_empty());
        assert_eq!(
            text(&Value::Null),
            vec!["providers     unknown (no live heartbeat reports them)"]
        );
    }

    #[test]
    fn a_single_provider_and_a_wait_for_a_quorum_warn() {
        let mut one = sample();
        one["quorum"] = json!({"quorum": 1, "providers": 1, "waits": 0, "waiting": null});
        let w = warnings(&one);
        assert!(w.iter().any(|w| w.starts_with("one RPC provider")), "{w:?}");
        assert_eq!(
            text(&one)[1],
            "  quorum      1 of 1 must agree on a block, 0 waits"
        );
        let mut waiting = sample();
        waiting["quorum"] = json!({"quorum": 2, "providers": 2, "waits": 5,
            "waiting": {"block": 77, "agree": 1, "asked": 2, "since_ms": 1}});
        let w = warnings(&waiting);
        assert!(
            w.iter().any(|w| {
                w
                == "ingest waits for a quorum of RPC providers on block 77: 1 of 2 agree (quorum 2)"
            }),
            "{w:?}"
        );
        assert!(!w.iter().any(|w| w.starts_with("one RPC provider")));
    }
}
