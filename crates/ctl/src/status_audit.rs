//! The completeness audit's part of `pmwctl status`: the audited watermark, how far it trails the
//! ingest watermark (blocks and block time), and per window (1h/24h/7d/30d) the fills checked,
//! missing (backfilled) and extra (retracted).

use pmw_core::exit::ServiceError;
use serde_json::{json, Value};

use crate::conn::{age, db_error};

/// The audit as JSON (`null` before its first range).
pub async fn collect(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let rows = c
        .query(include_str!("sql/audit_status.sql"), &[&now])
        .await
        .map_err(db_error)?;
    let Some(first) = rows.first() else {
        return Ok(Value::Null);
    };
    let windows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "window": r.get::<_, String>(5), "ranges": r.get::<_, i64>(6),
                "fills_checked": r.get::<_, i64>(7), "missing": r.get::<_, i64>(8),
                "extra": r.get::<_, i64>(9),
            })
        })
        .collect();
    Ok(json!({
        "block": first.get::<_, i64>(0),
        "updated_age_ms": now - first.get::<_, i64>(1),
        "ingest_block": first.get::<_, i64>(2),
        "trail_blocks": first.get::<_, i64>(3),
        "trail_ms": first.get::<_, Option<i64>>(4),
        "windows": windows,
    }))
}

/// The text line(s).
pub fn text(a: &Value) -> Vec<String> {
    if a.is_null() {
        return vec!["audit         no range audited yet".into()];
    }
    let mut out = vec![format!(
        "audit         through block {} (moved {} ago), {} blocks ({}) behind ingest",
        a["block"],
        a["updated_age_ms"].as_i64().map_or("-".into(), age),
        a["trail_blocks"],
        a["trail_ms"]
            .as_i64()
            .map_or("? of block time".into(), |ms| format!(
                "{} of block time",
                age(ms)
            )),
    )];
    for w in a["windows"].as_array().into_iter().flatten() {
        out.push(format!(
            "  last {:<4} {} fills checked, {} missing, {} extra ({} ranges)",
            w["window"].as_str().unwrap_or("?"),
            w["fills_checked"],
            w["missing"],
            w["extra"],
            w["ranges"],
        ));
    }
    out
}
