//! The live and stats pairs in `pmwctl status` (issue 44): each single writer's holder (from
//! `writer_epochs`: instance, epoch, lease age) and its standbys waiting on the lock, one line
//! each, and a warning when a pair has no fresh standby (the writer is a single point of
//! failure).

use pmw_core::exit::ServiceError;
use pmw_core::lock::keys;
use pmw_core::UnixMs;
use serde_json::{json, Value};

use crate::conn::{age, db_error};

/// A standby whose heartbeat is older than this is not counted (as for push's standbys).
const FRESH_MS: i64 = 15_000;

/// The pairs: service name and writer lock.
const PAIRS: [(&str, i64); 2] = [("pmw-live", keys::LIVE), ("pmw-stats", keys::STATS)];

/// `[{"service", "holder": {...}|null, "standbys": [...]}]`, one per pair.
pub async fn collect(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let mut out = Vec::new();
    for (service, key) in PAIRS {
        let holder = c
            .query_opt(include_str!("sql/writer_holder.sql"), &[&key])
            .await
            .map_err(db_error)?;
        let name: Option<String> = holder.as_ref().map(|r| r.get(0));
        let standbys = c
            .query(include_str!("sql/writer_standbys.sql"), &[&service, &name])
            .await
            .map_err(db_error)?;
        let standbys: Vec<Value> = standbys
            .iter()
            .map(|r| {
                let beat_age = now - r.get::<_, i64>(2);
                json!({
                    "instance": r.get::<_, String>(0), "pid": r.get::<_, i32>(1),
                    "beat_age_ms": beat_age, "fresh": beat_age <= FRESH_MS,
                })
            })
            .collect();
        let holder = holder.map(|r| {
            json!({
                "instance": r.get::<_, String>(0), "epoch": r.get::<_, i64>(1),
                "acquired_ms": r.get::<_, i64>(2), "lease_age_ms": now - r.get::<_, i64>(3),
            })
        });
        out.push(json!({ "service": service, "holder": holder, "standbys": standbys }));
    }
    Ok(Value::Array(out))
}

/// A warning per pair without a fresh standby.
pub fn warnings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            !p["standbys"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["fresh"] == true)
        })
        .map(|p| {
            let s = p["service"].as_str().unwrap_or("?");
            format!(
                "no {s} standby (no standby heartbeat in the last {} s): {s} is a single point of failure",
                FRESH_MS / 1_000
            )
        })
        .collect()
}

/// `live writer   live (epoch 3, since …, lease renewed 1 s ago)` and a line per standby.
pub fn text(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in v.as_array().into_iter().flatten() {
        let kind = p["service"]
            .as_str()
            .unwrap_or("?")
            .trim_start_matches("pmw-");
        out.push(match &p["holder"] {
            Value::Null => format!("{kind:<6}writer  none (never held)"),
            h => format!(
                "{kind:<6}writer  {} (epoch {}, since {}, lease renewed {} ago)",
                h["instance"].as_str().unwrap_or("?"),
                h["epoch"],
                UnixMs(h["acquired_ms"].as_i64().unwrap_or(0)).to_rfc3339(),
                h["lease_age_ms"].as_i64().map_or_else(|| "-".into(), age),
            ),
        });
        let standbys = p["standbys"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if standbys.is_empty() {
            out.push(format!("{kind:<6}standby none"));
        }
        for b in standbys {
            out.push(format!(
                "{kind:<6}standby {} (pid {}){}, heartbeat {} ago",
                b["instance"].as_str().unwrap_or("?"),
                b["pid"],
                if b["fresh"] == true { "" } else { " STALE" },
                b["beat_age_ms"].as_i64().map_or_else(|| "-".into(), age),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_for_a_pair_without_a_fresh_standby_and_shows_each_member() {
        let v = json!([
            {"service": "pmw-live", "holder": {"instance": "live", "epoch": 3, "acquired_ms": 0, "lease_age_ms": 900},
             "standbys": [{"instance": "live-b", "pid": 7, "beat_age_ms": 800, "fresh": true}]},
            {"service": "pmw-stats", "holder": null,
             "standbys": [{"instance": "stats-b", "pid": 8, "beat_age_ms": 60_000, "fresh": false}]},
        ]);
        let w = warnings(&v);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("no pmw-stats standby"), "{w:?}");
        let t = text(&v).join("\n");
        assert!(t.contains("live  writer  live (epoch 3"), "{t}");
        assert!(t.contains("live  standby live-b (pid 7), heartbeat"), "{t}");
        assert!(t.contains("stats writer  none"), "{t}");
        assert!(t.contains("stats standby stats-b (pid 8) STALE"), "{t}");
    }
}
