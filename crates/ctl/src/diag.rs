//! `pmwctl diag`: the runbook of docs/ARCHITECTURE.md §6.3, for "latency climbs".
//!
//! 1. The interval between consecutive push reads (the real poll period). Measured by sampling
//!    the push leader's heartbeat for `--sample-secs`: when its state carries a `rounds` counter
//!    the interval is Δtime / Δrounds (exact mean); otherwise it is the spacing of distinct
//!    `last_round_ms` values, whose resolution is the heartbeat period (push beats at most once a
//!    second, so a sub-second poll period shows as "≤ 1 s"). If the `pg_stat_statements`
//!    extension is installed, the calls/s of the statement every round starts with are shown
//!    too, found by its `pmw:push_round` marker comment ([`ROUND_MARKER`]), not by its text.
//! 2. LISTEN or polling: the leader's heartbeat `listener` (`listen`/`poll`), and whether a
//!    `pmw-push:listen` session exists in `pg_stat_activity` (a fallback to polling shows as
//!    `block listener lost` in push logs).
//! 3. Latency that grows with process age: who holds `backend_xmin` (pid, application_name,
//!    state, age of xmin, transaction and query start), and dead tuples and on-disk size of the
//!    hot tables.

use std::time::Duration;

use clap::Args;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::UnixMs;
use serde_json::{json, Value};

use crate::conn::{age, connect, db_error, size};

/// The marker comment in the statement push's every WebSocket round starts with
/// (`crates/push/src/sql/state.sql`, its round name filled in with `push_round`).
pub const ROUND_MARKER: &str = "/* pmw:push_round */";

/// The small, hot-updated tables (docs/ARCHITECTURE.md §7.2).
pub const HOT_TABLES: &[&str] = &[
    "ingest_cursor",
    "push_cursor",
    "push_epoch",
    "webhook_cursor",
    "heartbeats",
    "ws_claims",
];

#[derive(Debug, Args)]
pub struct DiagArgs {
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// How long to watch the push leader's rounds.
    #[arg(long, default_value_t = 5)]
    sample_secs: u64,
}

/// (1) The push read interval, sampled from the leader heartbeat.
async fn read_interval(c: &tokio_postgres::Client, secs: u64) -> Result<Value, ServiceError> {
    let q = include_str!("sql/leader_state.sql");
    let stmts = c
        .query_opt(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'",
            &[],
        )
        .await
        .map_err(db_error)?
        .is_some();
    let calls = || async {
        if !stmts {
            return Ok::<_, ServiceError>(None);
        }
        let r = c
            .query_one(include_str!("sql/round_calls.sql"), &[&ROUND_MARKER])
            .await
            .map_err(db_error)?;
        Ok(Some(r.get::<_, i64>(0)))
    };
    let calls0 = calls().await?;
    let t0 = UnixMs::now().0;
    let mut samples: Vec<(i64, Option<i64>)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs.max(1));
    while tokio::time::Instant::now() < deadline {
        if let Some(r) = c.query_opt(q, &[]).await.map_err(db_error)? {
            let s: Value = r.get(0);
            if let Some(last) = s["last_round_ms"].as_i64().filter(|t| *t > 0) {
                samples.push((last, s["rounds"].as_i64()));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = UnixMs::now().0 - t0;
    let calls_per_sec = match (calls0, calls().await?) {
        (Some(a), Some(b)) if elapsed > 0 => Some((b - a) as f64 * 1_000.0 / elapsed as f64),
        _ => None,
    };
    samples.dedup();
    let (first, last) = (samples.first().copied(), samples.last().copied());
    let (method, mean_ms) = match (first, last) {
        (Some((t0, Some(r0))), Some((t1, Some(r1)))) if r1 > r0 => {
            ("rounds counter", Some((t1 - t0) as f64 / (r1 - r0) as f64))
        }
        _ => {
            let mut ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
            ts.dedup();
            let gaps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
            let mean =
                (!gaps.is_empty()).then(|| gaps.iter().sum::<i64>() as f64 / gaps.len() as f64);
            (
                "spacing of last_round_ms (heartbeat resolution, about 1 s)",
                mean,
            )
        }
    };
    let finding = match mean_ms {
        None if samples.is_empty() => "no push leader heartbeat: push is not leading".to_string(),
        None => format!("no round completed in {secs} s: push is stuck or idle beyond the sample"),
        Some(m) if m > 3_500.0 => format!("push reads every {m:.0} ms: slower than the 3 s fallback, check the listener and round errors"),
        Some(m) => format!("push reads every {m:.0} ms on average"),
    };
    Ok(json!({
        "sample_ms": elapsed, "distinct_rounds_seen": samples.len(), "method": method,
        "mean_interval_ms": mean_ms, "pg_stat_statements": stmts, "watermark_reads_per_sec": calls_per_sec,
        "finding": finding,
    }))
}

/// (2) LISTEN or polling.
async fn listener(c: &tokio_postgres::Client) -> Result<Value, ServiceError> {
    let state = c
        .query_opt(include_str!("sql/leader_listener.sql"), &[])
        .await
        .map_err(db_error)?
        .and_then(|r| r.get::<_, Option<String>>(0));
    let sessions: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pmw-push:listen'",
            &[],
        )
        .await
        .map_err(db_error)?
        .get(0);
    let finding = match (state.as_deref(), sessions) {
        (Some("listen"), n) if n > 0 => "push waits on LISTEN pmw_blocks: woken by every block".to_string(),
        (Some("poll"), _) => "push fell back to polling (no LISTEN session): latency is the poll period; look for `block listener lost` in push logs".to_string(),
        (Some("listen"), _) => "push says listen but no pmw-push:listen session is connected: the session was just lost".to_string(),
        (None, _) => "unknown: no push leader heartbeat with a listener field".to_string(),
        (Some(other), _) => format!("unknown listener state {other:?}"),
    };
    Ok(json!({"listener": state, "listen_sessions": sessions, "finding": finding}))
}

/// (3a) Who holds back the xmin horizon.
async fn xmin_holders(c: &tokio_postgres::Client) -> Result<Value, ServiceError> {
    let rows = c
        .query(include_str!("sql/xmin_holders.sql"), &[])
        .await
        .map_err(db_error)?;
    Ok(Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "pid": r.get::<_, i32>(0), "application_name": r.get::<_, Option<String>>(1),
                    "state": r.get::<_, Option<String>>(2), "xmin_age_xids": r.get::<_, Option<i64>>(3),
                    "xact_age_ms": r.get::<_, Option<i64>>(4), "query_age_ms": r.get::<_, Option<i64>>(5),
                    "query": r.get::<_, Option<String>>(6),
                })
            })
            .collect(),
    ))
}

/// (3b) Dead tuples and size of the hot tables.
async fn hot_tables(c: &tokio_postgres::Client) -> Result<Value, ServiceError> {
    let rows = c
        .query(include_str!("sql/hot_tables.sql"), &[&HOT_TABLES])
        .await
        .map_err(db_error)?;
    Ok(Value::Array(
        rows.iter()
            .map(|r| {
                let (upd, hot): (i64, i64) = (r.get(3), r.get(4));
                json!({
                    "table": r.get::<_, String>(0), "live": r.get::<_, i64>(1), "dead": r.get::<_, i64>(2),
                    "updates": upd, "hot_updates": hot,
                    "hot_ratio": (upd > 0).then(|| hot as f64 / upd as f64),
                    "heap_bytes": r.get::<_, i64>(5), "total_bytes": r.get::<_, i64>(6),
                    "last_autovacuum_age_ms": r.get::<_, Option<i64>>(7),
                })
            })
            .collect(),
    ))
}

/// Everything `diag` reports, with warnings.
pub async fn collect(cfg: &CoreConfig, sample_secs: u64) -> Result<Value, ServiceError> {
    let c = connect(cfg).await?;
    let interval = read_interval(&c, sample_secs).await?;
    let listen = listener(&c).await?;
    let xmin = xmin_holders(&c).await?;
    let tables = hot_tables(&c).await?;
    let mut warnings = Vec::new();
    if listen["listener"] != "listen" {
        warnings.push(listen["finding"].clone());
    }
    for h in xmin.as_array().into_iter().flatten() {
        if h["xact_age_ms"].as_i64().unwrap_or(0) > 60_000 {
            warnings.push(json!(format!(
                "pid {} ({}) has held xmin for {}: vacuum cannot clean the hot tables behind it",
                h["pid"],
                h["application_name"].as_str().unwrap_or("?"),
                age(h["xact_age_ms"].as_i64().unwrap_or(0))
            )));
        }
    }
    for t in tables.as_array().into_iter().flatten() {
        let (live, dead) = (
            t["live"].as_i64().unwrap_or(0),
            t["dead"].as_i64().unwrap_or(0),
        );
        if dead > 1_000 && dead > 10 * live.max(1) {
            warnings.push(json!(format!(
                "{} has {dead} dead tuples for {live} live ({}): bloat; look for an xmin holder",
                t["table"].as_str().unwrap_or("?"),
                size(t["total_bytes"].as_i64().unwrap_or(0))
            )));
        }
    }
    Ok(json!({
        "read_interval": interval, "listener": listen, "xmin_holders": xmin, "hot_tables": tables,
        "warnings": warnings,
    }))
}

fn text(d: &Value) -> String {
    let mut o = String::new();
    let r = &d["read_interval"];
    o += &format!(
        "1. push read interval: {} [{}; {} distinct rounds in {} ms]\n",
        r["finding"].as_str().unwrap_or(""),
        r["method"].as_str().unwrap_or(""),
        r["distinct_rounds_seen"],
        r["sample_ms"]
    );
    match r["watermark_reads_per_sec"].as_f64() {
        Some(x) => o += &format!("   pg_stat_statements: {x:.2} watermark reads/s (push and api)\n"),
        None => o += "   pg_stat_statements: not installed (add it to shared_preload_libraries for statement rates)\n",
    }
    let l = &d["listener"];
    o += &format!("2. listener: {}\n", l["finding"].as_str().unwrap_or(""));
    o += "3. backend_xmin holders (oldest first):\n";
    let holders = d["xmin_holders"].as_array().cloned().unwrap_or_default();
    if holders.is_empty() {
        o += "   none\n";
    }
    for h in holders {
        o += &format!(
            "   pid {:<7} {:<28} {:<20} xmin age {} xids, xact {}, query {}: {}\n",
            h["pid"],
            h["application_name"].as_str().unwrap_or("-"),
            h["state"].as_str().unwrap_or("-"),
            h["xmin_age_xids"],
            h["xact_age_ms"].as_i64().map_or("-".into(), age),
            h["query_age_ms"].as_i64().map_or("-".into(), age),
            h["query"].as_str().unwrap_or("").replace('\n', " "),
        );
    }
    o += "   hot tables:\n";
    for t in d["hot_tables"].as_array().into_iter().flatten() {
        o += &format!(
            "   {:<14} live {:>6} dead {:>7}  heap {:>8} total {:>8}  hot updates {}\n",
            t["table"].as_str().unwrap_or(""),
            t["live"],
            t["dead"],
            size(t["heap_bytes"].as_i64().unwrap_or(0)),
            size(t["total_bytes"].as_i64().unwrap_or(0)),
            t["hot_ratio"]
                .as_f64()
                .map_or("-".into(), |x| format!("{:.0}%", x * 100.0)),
        );
    }
    for w in d["warnings"].as_array().into_iter().flatten() {
        o += &format!("warning: {}\n", w.as_str().unwrap_or(""));
    }
    o
}

pub async fn run(cfg: &CoreConfig, args: DiagArgs) -> Result<(), ServiceError> {
    let d = collect(cfg, args.sample_secs).await?;
    if args.json {
        println!("{d}");
    } else {
        print!("{}", text(&d));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_round_statement_carries_the_marker_diag_counts() {
        let round = include_str!("../../push/src/sql/state.sql").replace("{round}", "push_round");
        let sql: String = round.lines().filter(|l| !l.starts_with("--")).collect();
        assert!(sql.contains(super::ROUND_MARKER), "{sql}");
    }
}
