//! `pmwctl status`: who leads push (push_epoch + heartbeats) and which standby waits on the lock
//! (a warning when none has a fresh heartbeat: the leader is then a single point of failure),
//! the ingest and push cursors and their lag in blocks (against the chain head when the RPC
//! answers), the RPC providers as live sees them ([`crate::status_providers`]), the completeness audit (its watermark, trail and counts), the age of the leader's last round, every instance's heartbeat, and the webhook
//! backlog by age, the hot ledger (ClickHouse's lag behind it, [`crate::status_ledger`]), and any index of pmw's schema Postgres does not use or maintain
//! ([`crate::status_indexes`], a warning). Human-readable, or `--json` for machines.

use std::time::Duration;

use clap::Args;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::UnixMs;
use serde_json::{json, Value};

/// Instances that beat within this long count when comparing build revisions.
const STALE_FOR_REVISIONS_MS: i64 = 60_000;

use crate::conn::{connect, db_error};

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

/// Trades stored after the push cursor up to the watermark: what push has still to deliver,
/// from the hot ledger. (The push cursor only moves when a round finds trades, so its block lag
/// alone overstates the backlog on quiet chains.) `None` when it does not answer within 2 s.
async fn trades_waiting(
    c: &tokio_postgres::Client,
    block: i64,
    log: i32,
    watermark: i64,
) -> Option<u64> {
    let after = pmw_core::Cursor {
        block: u64::try_from(block).ok()?,
        log_index: u32::try_from(log).ok()?,
    };
    let q = pmw_core::pg::ledger::waiting(c, after, u64::try_from(watermark).ok()?);
    tokio::time::timeout(Duration::from_secs(2), q)
        .await
        .ok()?
        .ok()
}

/// The cursors `status` reports, each `None` until it exists.
#[derive(Debug, Clone, Copy, Default)]
struct Cursors {
    /// (block, moved at)
    ingest: Option<(i64, i64)>,
    /// (block, log index, epoch, moved at)
    push: Option<(i64, i32, i64, i64)>,
    /// (block, log index, moved at)
    lane: Option<(i64, i32, i64)>,
    /// (block, moved at)
    finalized: Option<(i64, i64)>,
    /// (block, log index, moved at)
    final_lane: Option<(i64, i32, i64)>,
}

async fn cursors(c: &tokio_postgres::Client) -> Result<Cursors, ServiceError> {
    let ingest = c
        .query_opt(include_str!("sql/ingest_cursor.sql"), &[])
        .await
        .map_err(db_error)?
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)));
    let push = c
        .query_opt(include_str!("sql/push_cursor.sql"), &[])
        .await
        .map_err(db_error)?
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)));
    let lane = c
        .query_opt(include_str!("sql/webhook_cursor.sql"), &[])
        .await
        .map_err(db_error)?
        .map(|r| (r.get(0), r.get(1), r.get(2)));
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
    Ok(Cursors {
        ingest,
        push,
        lane,
        finalized,
        final_lane,
    })
}

/// The push leader (slot 0) with its heartbeat's state, `null` when push never led.
async fn leader(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let row = c
        .query_opt(include_str!("sql/push_leader.sql"), &[])
        .await
        .map_err(db_error)?;
    Ok(row.map_or(Value::Null, |r| {
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
    }))
}

/// The push standbys waiting on the lock.
async fn standbys(c: &tokio_postgres::Client, now: i64) -> Result<Vec<Value>, ServiceError> {
    let rows = c
        .query(include_str!("sql/push_standbys.sql"), &[])
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|r| {
            let beat_age = now - r.get::<_, i64>(2);
            json!({
                "instance": r.get::<_, String>(0), "pid": r.get::<_, i32>(1), "beat_age_ms": beat_age,
                "waiting_age_ms": r.get::<_, Option<i64>>(3).map(|t| now - t),
                "fresh": beat_age <= STANDBY_FRESH_MS,
            })
        })
        .collect())
}

/// Every instance's heartbeat.
async fn instances(c: &tokio_postgres::Client, now: i64) -> Result<Vec<Value>, ServiceError> {
    let rows = c
        .query(include_str!("sql/heartbeats.sql"), &[])
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|r| {
            json!({
                "service": r.get::<_, String>(0), "instance": r.get::<_, String>(1), "pid": r.get::<_, i32>(2),
                "up_ms": now - r.get::<_, i64>(3), "beat_age_ms": now - r.get::<_, i64>(4),
                "role": r.get::<_, Option<String>>(5), "revision": r.get::<_, Option<String>>(6),
                "secret_keys": r.get::<_, Option<String>>(7).map(|k| k == "true"),
            })
        })
        .collect())
}

/// What an operator should act on: no fresh push standby; instances on different builds;
/// instances running without `PMW_SECRET_KEYS`.
fn warnings(standbys: &[Value], instances: &[Value]) -> Vec<String> {
    let mut warnings = Vec::new();
    if !standbys.iter().any(|s| s["fresh"] == true) {
        warnings.push(format!(
            "no push standby (no standby heartbeat in the last {} s): the push leader is a single point of failure",
            STANDBY_FRESH_MS / 1_000
        ));
    }
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
    warnings.extend(secret_keys_warning(instances));
    warnings
}

/// Fresh instances that run without `PMW_SECRET_KEYS` (their heartbeat says so), named.
fn secret_keys_warning(instances: &[Value]) -> Option<String> {
    let unset: Vec<String> = instances
        .iter()
        .filter(|i| {
            i["beat_age_ms"]
                .as_i64()
                .is_some_and(|a| a <= STALE_FOR_REVISIONS_MS)
        })
        .filter(|i| i["secret_keys"] == false)
        .map(|i| {
            format!(
                "{}/{}",
                i["service"].as_str().unwrap_or("?"),
                i["instance"].as_str().unwrap_or("?")
            )
        })
        .collect();
    (!unset.is_empty()).then(|| {
        format!(
            "{} (in {})",
            pmw_core::sealed::UNSET_WARNING,
            unset.join(", ")
        )
    })
}

/// The webhook backlog: pending, due, failed, the oldest pending, and pending by age.
async fn webhooks(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let hooks = c
        .query_one(include_str!("sql/webhook_backlog.sql"), &[&now])
        .await
        .map_err(db_error)?;
    let by_age: Vec<Value> = BUCKETS
        .iter()
        .enumerate()
        .map(|(i, (label, _))| json!({"age": label, "count": hooks.get::<_, i64>(4 + i)}))
        .collect();
    Ok(json!({
        "pending": hooks.get::<_, i64>(0), "due": hooks.get::<_, i64>(1), "failed": hooks.get::<_, i64>(2),
        "oldest_pending_age_ms": hooks.get::<_, Option<i64>>(3).map(|t| now - t),
        "by_age": by_age,
    }))
}

/// `<block:012>-<log:06>`, the cursor as clients see it.
fn cursor_text(block: i64, log: i32) -> String {
    format!("{block:012}-{log:06}")
}

/// Each cursor as JSON (with its age at `now`), and the lags between them in blocks.
fn cursors_json(k: &Cursors, head: Option<u64>, now: i64) -> Value {
    let ingest_block = k.ingest.map(|i| i.0);
    let finalized_block = k.finalized.map(|f| f.0);
    json!({
        "ingest": k.ingest.map(|(b, u)| json!({"block": b, "updated_age_ms": now - u})),
        "push": k.push.map(|(b, l, e, u)| json!({
            "block": b, "log_index": l, "cursor": cursor_text(b, l), "epoch": e, "updated_age_ms": now - u,
        })),
        "webhook_lane": k.lane.map(|(b, l, u)| json!({
            "block": b, "log_index": l, "cursor": cursor_text(b, l), "updated_age_ms": now - u,
        })),
        "finalized": k.finalized.map(|(b, u)| json!({"block": b, "updated_age_ms": now - u})),
        "final_lane": k.final_lane.map(|(b, l, u)| json!({
            "block": b, "log_index": l, "cursor": cursor_text(b, l), "updated_age_ms": now - u,
        })),
        "lag_blocks": {
            "ingest": head.zip(ingest_block).map(|(h, i)| h as i64 - i),
            "finalized": ingest_block.zip(finalized_block).map(|(i, f)| i - f),
            "final_lane": finalized_block.zip(k.final_lane.map(|l| l.0)).map(|(f, l)| f - l),
            "push": ingest_block.zip(k.push.map(|p| p.0)).map(|(i, p)| i - p),
            "webhook_lane": ingest_block.zip(k.lane.map(|l| l.0)).map(|(i, w)| i - w),
        },
    })
}

/// Everything `status` shows, as JSON.
pub async fn collect(cfg: &CoreConfig) -> Result<Value, ServiceError> {
    let c = connect(cfg).await?;
    let now = UnixMs::now().0;
    let head = chain_head(cfg).await;
    let k = cursors(&c).await?;
    let leader = leader(&c, now).await?;
    let standbys = standbys(&c, now).await?;
    let instances = instances(&c, now).await?;
    let mut warnings = warnings(&standbys, &instances);
    let indexes = crate::status_indexes::collect(&c).await?;
    warnings.extend(crate::status_indexes::warnings(&indexes));
    let webhooks = webhooks(&c, now).await?;
    let audit = crate::status_audit::collect(&c, now).await?;
    let providers = crate::status_providers::collect(&c, now).await?;
    warnings.extend(crate::status_providers::warnings(&providers));
    let ledger = crate::status_ledger::collect(&c, now).await?;
    warnings.extend(crate::status_ledger::warnings(&ledger));
    let emitters = crate::status_emitters::collect(&c).await?;
    warnings.extend(crate::status_emitters::warnings(&emitters));
    let pairs = crate::status_pairs::collect(&c, now).await?;
    warnings.extend(crate::status_pairs::warnings(&pairs));
    let waiting = match (k.ingest, k.push) {
        (Some((wm, _)), Some((b, l, _, _))) => trades_waiting(&c, b, l, wm).await,
        _ => None,
    };
    let mut out = json!({
        "now_ms": now,
        "chain_head": head,
        "push_backlog_trades": waiting,
        "ledger": ledger,
        "audit": audit,
        "providers": providers,
        "unlisted_emitters": emitters,
        "leader": leader,
        "standbys": standbys,
        "pairs": pairs,
        "warnings": warnings,
        "instances": instances,
        "webhooks": webhooks,
        "indexes": crate::status_indexes::json(&indexes),
    });
    if let (Value::Object(o), Value::Object(cur)) = (&mut out, cursors_json(&k, head, now)) {
        o.extend(cur);
    }
    Ok(out)
}

pub async fn run(cfg: &CoreConfig, args: StatusArgs) -> Result<(), ServiceError> {
    let s = collect(cfg).await?;
    if args.json {
        println!("{s}");
    } else {
        print!("{}", crate::status_text::text(&s));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_without_a_fresh_standby_and_on_mixed_builds_of_live_instances() {
        let fresh = [json!({"fresh": true})];
        let stale = [json!({"fresh": false})];
        let same = [
            json!({"beat_age_ms": 1_000, "revision": "a"}),
            json!({"beat_age_ms": 2_000, "revision": "a"}),
            json!({"beat_age_ms": 600_000, "revision": "old"}),
        ];
        assert!(warnings(&fresh, &same).is_empty());
        let w = warnings(&stale, &same);
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("no push standby (no standby heartbeat in the last 15 s)"));
        let mixed = [
            json!({"beat_age_ms": 1_000, "revision": "b"}),
            json!({"beat_age_ms": 1_000, "revision": "a"}),
            json!({"beat_age_ms": 1_000}),
        ];
        let w = warnings(&fresh, &mixed);
        assert_eq!(
            w,
            ["services run different builds (a, b, unknown): restart the ones left on an older revision"]
        );
    }

    #[test]
    fn lags_are_between_neighbouring_cursors_and_absent_without_both() {
        let k = Cursors {
            ingest: Some((118, 900)),
            push: Some((110, 3, 4, 950)),
            lane: None,
            finalized: Some((100, 800)),
            final_lane: Some((97, 0, 700)),
        };
        let v = cursors_json(&k, Some(120), 1_000);
        assert_eq!(
            v["lag_blocks"],
            json!({"ingest": 2, "push": 8, "webhook_lane": null, "finalized": 18, "final_lane": 3})
        );
        assert_eq!(v["push"]["cursor"], "000000000110-000003");
        assert_eq!(v["push"]["updated_age_ms"], 50);
        assert!(v["webhook_lane"].is_null());
        let none = cursors_json(&Cursors::default(), None, 1_000);
        assert!(none["lag_blocks"]["ingest"].is_null());
    }
}
