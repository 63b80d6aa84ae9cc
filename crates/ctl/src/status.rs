//! `pmwctl status`: who leads push (push_epoch + heartbeats) and which standby waits on the lock
//! (a warning when none has a fresh heartbeat: the leader is then a single point of failure),
//! the ingest and push cursors and their lag in blocks (against the chain head when the RPC
//! answers), the completeness audit (its watermark, trail and counts), the age of the leader's last round, every instance's heartbeat, and the webhook
//! backlog by age. Human-readable, or `--json` for machines.

use std::time::Duration;

use clap::Args;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::UnixMs;
use serde_json::{json, Value};

/// Instances that beat within this long count when comparing build revisions.
const STALE_FOR_REVISIONS_MS: i64 = 60_000;

use crate::conn::{age, connect, db_error};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Age buckets of pending webhook deliveries: (label, lower bound in ms).
const BUCKETS: &[(&str, i64)] = &[
    ("<10s", 0),
    ("10s-1m", 10_000),
    ("1m-10m", 60_000),
    ("10m-1h", 600_000),
    (">1h", 3_600_000),
];

/// A standby whose heartbeat is older than this is not counted (the API's default
/// `PMW_API_READY_ROUND_MAX_AGE_MS`; a standby beats every second while it waits).
const STANDBY_FRESH_MS: i64 = 15_000;

/// The chain head from the RPC (`eth_blockNumber`), if it answers within 2 s.
async fn chain_head(cfg: &CoreConfig) -> Option<u64> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let v: Value = client
        .post(&cfg.rpc_http_url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    u64::from_str_radix(v["result"].as_str()?.trim_start_matches("0x"), 16).ok()
}

/// Trades stored after the push cursor up to the watermark: what push has still to deliver.
/// (The push cursor only moves when a round finds trades, so its block lag alone overstates the
/// backlog on quiet chains.) `None` when ClickHouse does not answer within 2 s.
async fn trades_waiting(cfg: &CoreConfig, block: i64, log: i32, watermark: i64) -> Option<u64> {
    let ch = pmw_core::ch::client(cfg);
    let after = pmw_core::Cursor {
        block: u64::try_from(block).ok()?,
        log_index: u32::try_from(log).ok()?,
    };
    let q = pmw_core::ch::trades::waiting(&ch, after, u64::try_from(watermark).ok()?);
    tokio::time::timeout(Duration::from_secs(2), q)
        .await
        .ok()?
        .ok()
}

/// Everything `status` shows, as JSON.
pub async fn collect(cfg: &CoreConfig) -> Result<Value, ServiceError> {
    let c = connect(cfg).await?;
    let now = UnixMs::now().0;
    let head = chain_head(cfg).await;
    let ingest = c
        .query_opt(
            "SELECT block_number, updated_ms FROM ingest_cursor WHERE id = 1",
            &[],
        )
        .await
        .map_err(db_error)?
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)));
    let push = c
        .query_opt(
            "SELECT block_number, log_index, epoch, updated_ms FROM push_cursor WHERE slot = 0",
            &[],
        )
        .await
        .map_err(db_error)?
        .map(|r| {
            (
                r.get::<_, i64>(0),
                r.get::<_, i32>(1),
                r.get::<_, i64>(2),
                r.get::<_, i64>(3),
            )
        });
    let lane = c
        .query_opt(
            "SELECT block_number, log_index, updated_ms FROM webhook_cursor WHERE slot = 0",
            &[],
        )
        .await
        .map_err(db_error)?
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1), r.get::<_, i64>(2)));
    let fin = c
        .query_opt(include_str!("sql/finality.sql"), &[])
        .await
        .map_err(db_error)?;
    let finalized = fin
        .as_ref()
        .and_then(|r| r.get::<_, Option<i64>>(0).zip(r.get::<_, Option<i64>>(1)));
    let final_lane = fin.as_ref().and_then(|r| {
        Some((
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, Option<i32>>(3)?,
            r.get::<_, Option<i64>>(4)?,
        ))
    });
    let leader = c
        .query_opt(
            include_str!("sql/push_leader.sql"),
            &[],
        )
        .await
        .map_err(db_error)?
        .map(|r| {
            let state: Option<Value> = r.get(5);
            let state = state.unwrap_or(Value::Null);
            let beat: Option<i64> = r.get(4);
            json!({
                "slot": r.get::<_, i16>(0), "epoch": r.get::<_, i64>(1), "instance": r.get::<_, String>(2),
                "acquired_ms": r.get::<_, i64>(3), "pid": r.get::<_, Option<i32>>(6),
                "role": state["role"], "beat_age_ms": beat.map(|b| now - b),
                "last_round_age_ms": state["last_round_ms"].as_i64().filter(|t| *t > 0).map(|t| now - t),
                "listener": state["listener"], "sessions": state["sessions"], "errors": state["errors"],
                "cursor": state["cursor"],
            })
        });
    let standbys: Vec<Value> = c
        .query(
            include_str!("sql/push_standbys.sql"),
            &[],
        )
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| {
            let beat_age = now - r.get::<_, i64>(2);
            json!({
                "instance": r.get::<_, String>(0), "pid": r.get::<_, i32>(1), "beat_age_ms": beat_age,
                "waiting_age_ms": r.get::<_, Option<i64>>(3).map(|t| now - t),
                "fresh": beat_age <= STANDBY_FRESH_MS,
            })
        })
        .collect();
    let mut warnings = Vec::new();
    if !standbys.iter().any(|s| s["fresh"] == true) {
        warnings.push(format!(
            "no push standby (no standby heartbeat in the last {} s): the push leader is a single point of failure",
            STANDBY_FRESH_MS / 1_000
        ));
    }
    let instances: Vec<Value> = c
        .query(
            "SELECT service, instance, pid, started_ms, beat_ms, state->>'role', state->>'revision' FROM heartbeats ORDER BY service, instance",
            &[],
        )
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| {
            json!({
                "service": r.get::<_, String>(0), "instance": r.get::<_, String>(1), "pid": r.get::<_, i32>(2),
                "up_ms": now - r.get::<_, i64>(3), "beat_age_ms": now - r.get::<_, i64>(4),
                "role": r.get::<_, Option<String>>(5), "revision": r.get::<_, Option<String>>(6),
            })
        })
        .collect();
    let mut revisions: Vec<String> = instances
        .iter()
        .filter(|i| {
            i["beat_age_ms"]
                .as_i64()
                .is_some_and(|a| a <= STALE_FOR_REVISIONS_MS)
        })
        .map(|i| i["revision"].as_str().unwrap_or("unknown").to_string())
        .collect();
    revisions.sort();
    revisions.dedup();
    if revisions.len() > 1 {
        warnings.push(format!(
            "services run different builds ({}): restart the ones left on an older revision",
            revisions.join(", ")
        ));
    }
    let hooks = c
        .query_one(include_str!("sql/webhook_backlog.sql"), &[&now])
        .await
        .map_err(db_error)?;
    let by_age: Vec<Value> = BUCKETS
        .iter()
        .enumerate()
        .map(|(i, (label, _))| json!({"age": label, "count": hooks.get::<_, i64>(4 + i)}))
        .collect();
    let audit = crate::status_audit::collect(&c, now).await?;
    let ingest_block = ingest.map(|i| i.0);
    let push_block = push.map(|p| p.0);
    let waiting = match (ingest, push) {
        (Some((wm, _)), Some((b, l, _, _))) => trades_waiting(cfg, b, l, wm).await,
        _ => None,
    };
    Ok(json!({
        "now_ms": now,
        "chain_head": head,
        "ingest": ingest.map(|(b, u)| json!({"block": b, "updated_age_ms": now - u})),
        "push": push.map(|(b, l, e, u)| json!({
            "block": b, "log_index": l, "cursor": format!("{b:012}-{l:06}"), "epoch": e, "updated_age_ms": now - u,
        })),
        "webhook_lane": lane.map(|(b, l, u)| json!({
            "block": b, "log_index": l, "cursor": format!("{b:012}-{l:06}"), "updated_age_ms": now - u,
        })),
        "finalized": finalized.map(|(b, u)| json!({"block": b, "updated_age_ms": now - u})),
        "final_lane": final_lane.map(|(b, l, u)| json!({
            "block": b, "log_index": l, "cursor": format!("{b:012}-{l:06}"), "updated_age_ms": now - u,
        })),
        "lag_blocks": {
            "ingest": head.zip(ingest_block).map(|(h, i)| h as i64 - i),
            "finalized": ingest_block.zip(finalized.map(|f| f.0)).map(|(i, f)| i - f),
            "final_lane": finalized.map(|f| f.0).zip(final_lane.map(|l| l.0)).map(|(f, l)| f - l),
            "push": ingest_block.zip(push_block).map(|(i, p)| i - p),
            "webhook_lane": ingest_block.zip(lane.map(|l| l.0)).map(|(i, w)| i - w),
        },
        "push_backlog_trades": waiting,
        "audit": audit,
        "leader": leader,
        "standbys": standbys,
        "warnings": warnings,
        "instances": instances,
        "webhooks": {
            "pending": hooks.get::<_, i64>(0), "due": hooks.get::<_, i64>(1), "failed": hooks.get::<_, i64>(2),
            "oldest_pending_age_ms": hooks.get::<_, Option<i64>>(3).map(|t| now - t),
            "by_age": by_age,
        },
    }))
}

fn opt_age(v: &Value) -> String {
    v.as_i64().map_or_else(|| "-".into(), age)
}

fn text(s: &Value) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    match &s["leader"] {
        Value::Null => line("push leader   none (no push_epoch row: push never led)".into()),
        l => line(format!(
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
        )),
    }
    let standbys = s["standbys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if standbys.is_empty() {
        line("push standby  none".into());
    }
    for b in standbys {
        line(format!(
            "push standby  {} (pid {}){}, heartbeat {} ago, waiting on the lock for {}",
            b["instance"].as_str().unwrap_or("?"),
            b["pid"],
            if b["fresh"] == true { "" } else { " STALE" },
            opt_age(&b["beat_age_ms"]),
            opt_age(&b["waiting_age_ms"]),
        ));
    }
    line(format!(
        "chain head    {}",
        s["chain_head"]
            .as_u64()
            .map_or("unknown (RPC did not answer)".into(), |h| h.to_string())
    ));
    line(match &s["ingest"] {
        Value::Null => "ingest        no watermark yet".into(),
        i => format!(
            "ingest        block {} (moved {} ago), {} blocks behind the head",
            i["block"],
            opt_age(&i["updated_age_ms"]),
            s["lag_blocks"]["ingest"]
                .as_i64()
                .map_or("?".into(), |l| l.to_string())
        ),
    });
    line(match &s["push"] {
        Value::Null => "push cursor   none yet".into(),
        p => format!(
            "push cursor   {} (epoch {}, moved {} ago), {} blocks behind ingest, {} trades waiting",
            p["cursor"].as_str().unwrap_or("?"),
            p["epoch"],
            opt_age(&p["updated_age_ms"]),
            s["lag_blocks"]["push"]
                .as_i64()
                .map_or("?".into(), |l| l.to_string()),
            s["push_backlog_trades"]
                .as_u64()
                .map_or("?".into(), |l| l.to_string())
        ),
    });
    if let Some(l) = s["webhook_lane"].as_object() {
        line(format!(
            "webhook lane  {} (moved {} ago), {} blocks behind ingest",
            l["cursor"].as_str().unwrap_or("?"),
            opt_age(&l["updated_age_ms"]),
            s["lag_blocks"]["webhook_lane"]
                .as_i64()
                .map_or("?".into(), |l| l.to_string())
        ));
    }
    let lag = |k: &str| {
        s["lag_blocks"][k]
            .as_i64()
            .map_or("?".into(), |l| l.to_string())
    };
    line(match s["finalized"].as_object() {
        None => "finalized     no finalized watermark yet".into(),
        Some(f) => format!(
            "finalized     block {} (moved {} ago), {} blocks behind ingest",
            f["block"],
            opt_age(&f["updated_age_ms"]),
            lag("finalized")
        ),
    });
    if let Some(l) = s["final_lane"].as_object() {
        line(format!(
            "final lane    {} (moved {} ago), {} blocks behind finalized",
            l["cursor"].as_str().unwrap_or("?"),
            opt_age(&l["updated_age_ms"]),
            lag("final_lane")
        ));
    }
    for l in crate::status_audit::text(&s["audit"]) {
        line(l);
    }
    let w = &s["webhooks"];
    let buckets: Vec<String> = w["by_age"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{} {}", b["age"].as_str().unwrap_or(""), b["count"]))
        .collect();
    line(format!(
        "webhooks      {} pending ({} due), {} failed; by age: {}",
        w["pending"],
        w["due"],
        w["failed"],
        buckets.join(", ")
    ));
    line("instances".into());
    for i in s["instances"].as_array().into_iter().flatten() {
        line(format!(
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
        line(format!("WARNING       {}", w.as_str().unwrap_or("")));
    }
    out
}

pub async fn run(cfg: &CoreConfig, args: StatusArgs) -> Result<(), ServiceError> {
    let s = collect(cfg).await?;
    if args.json {
        println!("{s}");
    } else {
        print!("{}", text(&s));
    }
    Ok(())
}
