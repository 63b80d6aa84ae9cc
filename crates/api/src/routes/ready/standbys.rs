//! The live and stats pairs' standbys (issue 44): like `push_standby`, a fresh `standby`
//! heartbeat of another instance than the writer lock's holder. Reported only: without one the
//! leader serves, but it is a single point of failure.

use pmw_core::lock::keys;
use serde_json::Value;

use super::check::Check;
use super::probe::rows;
use crate::AppState;

/// `live_standby`: a pmw-live standby waits on the live writer lock.
pub async fn live(st: &AppState, now: i64) -> Check {
    standby(st, now, "pmw-live", keys::LIVE).await
}

/// `stats_standby`: a pmw-stats standby waits on the stats writer lock.
pub async fn stats(st: &AppState, now: i64) -> Check {
    standby(st, now, "pmw-stats", keys::STATS).await
}

async fn standby(st: &AppState, now: i64, service: &'static str, key: i64) -> Check {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let sql = include_str!("sql/writer_standbys.sql").replace("{service}", service);
    let rows = match rows(st, &sql, &[key]).await {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                format!("{service} standby: postgres unreachable: {e}"),
                Value::Null,
            )
        }
    };
    let ages: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), now - r.get::<_, i64>(1)))
        .collect();
    verdict(service, &ages, max_age)
}

/// Pass with at least one standby beat fresher than `max_age`, else fail naming why.
fn verdict(service: &str, ages: &[(String, i64)], max_age: i64) -> Check {
    let fresh: Vec<&str> = ages
        .iter()
        .filter(|(_, age)| *age <= max_age)
        .map(|(i, _)| i.as_str())
        .collect();
    let detail = serde_json::json!({
        "standbys": fresh.len(), "instances": fresh, "max_age_ms": max_age,
    });
    if !fresh.is_empty() {
        return Check::pass(detail);
    }
    let why = match ages.iter().map(|(_, a)| *a).min() {
        Some(age) => format!("last standby beat {age} ms ago (limit {max_age} ms)"),
        None => "no standby heartbeat".into(),
    };
    Check::fail(
        format!("no {service} standby: {why}; {service} is a single point of failure"),
        detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_standby_passes_a_stale_or_missing_one_warns() {
        assert!(verdict("pmw-live", &[("live-b".into(), 900)], 1_000).ok);
        let stale = verdict("pmw-live", &[("live-b".into(), 5_000)], 1_000);
        assert!(!stale.ok);
        assert_eq!(
            stale.reason.as_deref(),
            Some("no pmw-live standby: last standby beat 5000 ms ago (limit 1000 ms); pmw-live is a single point of failure")
        );
        let none = verdict("pmw-stats", &[], 1_000);
        assert!(none
            .reason
            .unwrap()
            .starts_with("no pmw-stats standby: no standby heartbeat"));
    }
}
