//! pmw-live's RPC providers in `/latency.json`'s diagnostics (for operators, not the headline):
//! per provider, as the live leader's newest heartbeat reports them, the heads it announced and
//! won (its arrival stamped `t_detect_ms`), how far behind the winner it was (p50/p95 ms), its
//! standing (healthy or demoted, and why), errors, "not found" answers and hedges. `null` when no
//! live heartbeat reports providers.

use pmw_core::pg::PgPool;
use serde_json::{json, Value};

use crate::error::StatsError;
use crate::model::iso;

/// `{"as_of": <the heartbeat's time>, "providers": [...]}`, or `null`.
pub async fn current(pg: &PgPool) -> Result<Value, StatsError> {
    let c = pg.get().await.map_err(pmw_core::pg::PgError::from)?;
    let row = c
        .query_opt(include_str!("sql/live_providers.sql"), &[])
        .await?;
    Ok(row.map_or(Value::Null, |r| {
        json!({
            "as_of": iso(r.get::<_, i64>(0)),
            "providers": r.get::<_, Value>(1),
        })
    }))
}
