//! `pmwctl status` as text: one labelled line per part of the JSON `status`
//! collects (leader, standbys, the live and stats pairs, cursors and lags, RPC providers, audit, webhooks, indexes, unlisted emitters, instances, warnings).

use pmw_core::UnixMs;
use serde_json::Value;

use crate::conn::age;

fn opt_age(v: &Value) -> String {
    v.as_i64().map_or_else(|| "-".into(), age)
}

/// A number, or `?` when absent.
fn or_unknown(v: &Value) -> String {
    v.as_i64().map_or("?".into(), |l| l.to_string())
}

/// The status as text.
pub fn text(s: &Value) -> String {
    let mut lines = leader_lines(s);
    lines.extend(crate::status_pairs::text(&s["pairs"]));
    lines.extend(cursor_lines(s));
    lines.extend(crate::status_providers::text(&s["providers"]));
    lines.extend(crate::status_audit::text(&s["audit"]));
    lines.push(webhook_line(&s["webhooks"]));
    lines.push(crate::status_indexes::text(&s["indexes"]));
    lines.push(crate::status_ledger::text(&s["ledger"]));
    lines.extend(crate::status_emitters::text(&s["unlisted_emitters"]));
    lines.extend(instance_lines(s));
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The push leader and its standbys.
fn leader_lines(s: &Value) -> Vec<String> {
    let mut out = vec![match &s["leader"] {
        Value::Null => "push leader   none (no push_epoch row: push never led)".into(),
        l => format!(
            "push leader   {} (pid {}), epoch {}, since {}; heartbeat {} ago, role {}, last round {} ago, listener {}, {} ws sessions",
            l["instance"].as_str().unwrap_or("?"),
            l["pid"],
            l["epoch"],
            UnixMs(l["acquired_ms"].as_i64().unwrap_or(0)).to_rfc3339(),
            opt_age(&l["beat_age_ms"]),
            l["role"].as_str().unwrap_or("unknown"),
            opt_age(&l["last_round_age_ms"]),
            l["listener"].as_str().unwrap_or("unknown"),
            l["sessions"],
        ),
    }];
    let standbys = s["standbys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if standbys.is_empty() {
        out.push("push standby  none".into());
    }
    for b in standbys {
        out.push(format!(
            "push standby  {} (pid {}){}, heartbeat {} ago, waiting on the lock for {}",
            b["instance"].as_str().unwrap_or("?"),
            b["pid"],
            if b["fresh"] == true { "" } else { " STALE" },
            opt_age(&b["beat_age_ms"]),
            opt_age(&b["waiting_age_ms"]),
        ));
    }
    out
}

/// The chain head, then each cursor with its lag.
fn cursor_lines(s: &Value) -> Vec<String> {
    let lag = |k: &str| or_unknown(&s["lag_blocks"][k]);
    let mut out = vec![format!(
        "chain head    {}",
        s["chain_head"]
            .as_u64()
            .map_or("unknown (RPC did not answer)".into(), |h| h.to_string())
    )];
    out.push(match &s["ingest"] {
        Value::Null => "ingest        no watermark yet".into(),
        i => format!(
            "ingest        block {} (moved {} ago), {} blocks behind the head",
            i["block"],
            opt_age(&i["updated_age_ms"]),
            lag("ingest")
        ),
    });
    out.push(match &s["push"] {
        Value::Null => "push cursor   none yet".into(),
        p => format!(
            "push cursor   {} (epoch {}, moved {} ago), {} blocks behind ingest, {} trades waiting",
            p["cursor"].as_str().unwrap_or("?"),
            p["epoch"],
            opt_age(&p["updated_age_ms"]),
            lag("push"),
            s["push_backlog_trades"]
                .as_u64()
                .map_or("?".into(), |l| l.to_string())
        ),
    });
    if let Some(l) = s["webhook_lane"].as_object() {
        out.push(format!(
            "webhook lane  {} (moved {} ago), {} blocks behind ingest",
            l["cursor"].as_str().unwrap_or("?"),
            opt_age(&l["updated_age_ms"]),
            lag("webhook_lane")
        ));
    }
    out.push(match s["finalized"].as_object() {
        None => "finalized     no finalized watermark yet".into(),
        Some(f) => format!(
            "finalized     block {} (moved {} ago), {} blocks behind ingest",
            f["block"],
            opt_age(&f["updated_age_ms"]),
            lag("finalized")
        ),
    });
    if let Some(l) = s["final_lane"].as_object() {
        out.push(format!(
            "final lane    {} (moved {} ago), {} blocks behind finalized",
            l["cursor"].as_str().unwrap_or("?"),
            opt_age(&l["updated_age_ms"]),
            lag("final_lane")
        ));
    }
    out
}

/// The webhook backlog.
fn webhook_line(w: &Value) -> String {
    let buckets: Vec<String> = w["by_age"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{} {}", b["age"].as_str().unwrap_or(""), b["count"]))
        .collect();
    format!(
        "webhooks      {} pending ({} due), {} failed; by age: {}",
        w["pending"],
        w["due"],
        w["failed"],
        buckets.join(", ")
    )
}

/// Every instance's heartbeat, then the warnings.
fn instance_lines(s: &Value) -> Vec<String> {
    let mut out = vec!["instances".to_string()];
    for i in s["instances"].as_array().into_iter().flatten() {
        out.push(format!(
            "  {:<10} {:<10} pid {:<8} role {:<8} beat {} ago, up {}, revision {}",
            i["service"].as_str().unwrap_or(""),
            i["instance"].as_str().unwrap_or(""),
            i["pid"],
            i["role"].as_str().unwrap_or("-"),
            opt_age(&i["beat_age_ms"]),
            opt_age(&i["up_ms"]),
            i["revision"].as_str().unwrap_or("?"),
        ));
    }
    for w in s["warnings"].as_array().into_iter().flatten() {
        out.push(format!("WARNING       {}", w.as_str().unwrap_or("")));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::text;

    #[test]
    fn an_empty_deployment_says_what_is_missing() {
        let s = json!({
            "leader": null, "standbys": [], "chain_head": null, "ingest": null, "push": null,
            "webhook_lane": null, "finalized": null, "final_lane": null, "lag_blocks": {},
            "audit": null, "instances": [], "warnings": ["no push standby"],
            "webhooks": {"pending": 0, "due": 0, "failed": 0, "by_age": [{"age": "<10s", "count": 0}]},
        });
        let t = text(&s);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "push leader   none (no push_epoch row: push never led)"
        );
        assert_eq!(lines[1], "push standby  none");
        assert_eq!(lines[2], "chain head    unknown (RPC did not answer)");
        assert_eq!(lines[3], "ingest        no watermark yet");
        assert_eq!(lines[4], "push cursor   none yet");
        assert_eq!(lines[5], "finalized     no finalized watermark yet");
        assert!(!t.contains("webhook lane"), "{t}");
        assert!(
            t.contains("webhooks      0 pending (0 due), 0 failed; by age: <10s 0\n"),
            "{t}"
        );
        assert!(
            t.ends_with("instances\nWARNING       no push standby\n"),
            "{t}"
        );
    }

    #[test]
    fn cursors_show_their_lag_and_a_stale_standby_is_marked() {
        let s = json!({
            "leader": null,
            "standbys": [{"instance": "b", "pid": 7, "fresh": false, "beat_age_ms": null, "waiting_age_ms": null}],
            "chain_head": 120,
            "ingest": {"block": 118, "updated_age_ms": null},
            "push": {"cursor": "000000000110-000003", "epoch": 4, "updated_age_ms": null},
            "push_backlog_trades": 9,
            "webhook_lane": {"cursor": "000000000100-000000", "updated_age_ms": null},
            "lag_blocks": {"ingest": 2, "push": 8, "webhook_lane": 18},
            "audit": null, "instances": [], "warnings": [], "webhooks": {},
        });
        let t = text(&s);
        assert!(
            t.contains("push standby  b (pid 7) STALE, heartbeat - ago"),
            "{t}"
        );
        assert!(
            t.contains("ingest        block 118 (moved - ago), 2 blocks behind the head"),
            "{t}"
        );
        assert!(t.contains("push cursor   000000000110-000003 (epoch 4, moved - ago), 8 blocks behind ingest, 9 trades waiting"), "{t}");
        assert!(
            t.contains("webhook lane  000000000100-000000 (moved - ago), 18 blocks behind ingest"),
            "{t}"
        );
    }
}
