//! The readiness verdict as Prometheus gauges, set on every `/metrics` scrape (the alert rules in
//! `deploy/prometheus/` read them; no blackbox prober needed).
//!
//! | metric | meaning |
//! |---|---|
//! | `pmw_api_ready` | 1 when `/v1/ready` would answer 200, else 0 |
//! | `pmw_api_ready_check{check}` | 1 when that check passes (`postgres`, `clickhouse`, `ingest`, `push`, `webhooks`, `latency`, `push_standby`, `live_standby`, `stats_standby`, `stats`, `revisions`, `indexes`, `projector`, `rpc_providers`, `unlisted_emitters`) |
//! | `pmw_api_ingest_lag_blocks` | newest head seen by pmw-live − ingest watermark (from its heartbeat) |
//! | `pmw_api_push_last_round_age_seconds` | since the push leader's last completed round |
//! | `pmw_api_webhook_overdue` / `pmw_api_webhook_oldest_due_age_seconds` | webhook deliveries due and unclaimed beyond the bound, and the age of the oldest (0 when none) |
//! | `pmw_api_builds` | distinct build revisions among the services beating now |

use serde_json::Value;

use super::{Check, Readiness};

pub const READY: &str = "pmw_api_ready";
pub const READY_CHECK: &str = "pmw_api_ready_check";
pub const INGEST_LAG: &str = "pmw_api_ingest_lag_blocks";
pub const PUSH_ROUND_AGE: &str = "pmw_api_push_last_round_age_seconds";
pub const WEBHOOK_OVERDUE: &str = "pmw_api_webhook_overdue";
pub const WEBHOOK_OLDEST_DUE: &str = "pmw_api_webhook_oldest_due_age_seconds";
pub const BUILDS: &str = "pmw_api_builds";

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Set the gauges from one evaluation. Measurements missing from a check's detail (its probe
/// failed) leave the gauge at its last value; the check's own flag says it failed.
pub fn export(r: &Readiness) {
    metrics::gauge!(READY).set(flag(r.ready));
    let c = &r.checks;
    let all: [(&'static str, &Check); 15] = [
        ("postgres", &c.postgres),
        ("clickhouse", &c.clickhouse),
        ("ingest", &c.ingest),
        ("push", &c.push),
        ("webhooks", &c.webhooks),
        ("latency", &c.latency),
        ("push_standby", &c.push_standby),
        ("live_standby", &c.live_standby),
        ("stats_standby", &c.stats_standby),
        ("stats", &c.stats),
        ("revisions", &c.revisions),
        ("indexes", &c.indexes),
        ("projector", &c.projector),
        ("rpc_providers", &c.rpc_providers),
        ("unlisted_emitters", &c.unlisted_emitters),
    ];
    for (name, check) in all {
        metrics::gauge!(READY_CHECK, "check" => name).set(flag(check.ok));
    }
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    if let Some(lag) = num(&c.ingest.detail, "lag_blocks") {
        metrics::gauge!(INGEST_LAG).set(lag);
    }
    if let Some(age) = num(&c.push.detail, "last_round_age_ms") {
        metrics::gauge!(PUSH_ROUND_AGE).set(age / 1000.0);
    }
    if c.webhooks.ok && c.webhooks.detail.is_null() {
        metrics::gauge!(WEBHOOK_OVERDUE).set(0.0);
        metrics::gauge!(WEBHOOK_OLDEST_DUE).set(0.0);
    } else if let Some(n) = num(&c.webhooks.detail, "overdue") {
        metrics::gauge!(WEBHOOK_OVERDUE).set(n);
        let age = num(&c.webhooks.detail, "oldest_due_age_ms").unwrap_or(0.0);
        metrics::gauge!(WEBHOOK_OLDEST_DUE).set(age / 1000.0);
    }
    if let Some(running) = c.revisions.detail.as_array() {
        let mut revs: Vec<&str> = running
            .iter()
            .filter_map(|r| r.get("revision").and_then(Value::as_str))
            .collect();
        revs.sort_unstable();
        revs.dedup();
        metrics::gauge!(BUILDS).set(revs.len() as f64);
    }
}
