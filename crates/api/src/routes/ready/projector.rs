//! The projector check: how far ClickHouse (history) is behind the Postgres hot ledger (core's
//! one query). Reported in `warnings`, never gating: delivery reads the hot ledger and goes on
//! while ClickHouse is behind or down; only history older than the hot window waits.

use pmw_core::pg::ledger::projection;
use serde_json::json;

use super::probe::bounded;
use super::Check;
use crate::AppState;

/// ClickHouse further behind the hot ledger than this is a warning.
pub const MAX_LAG_MS: i64 = 60_000;

/// Pass with the lag; fail (a warning) past [`MAX_LAG_MS`].
pub async fn projector(st: &AppState, now: i64) -> Check {
    let found = bounded(async {
        let c = st.ready_pg.get().await.map_err(|e| e.to_string())?;
        projection(&**c).await.map_err(|e| e.to_string())
    })
    .await;
    match found {
        Err(e) => Check::fail(
            format!("projector lag unknown: {e}"),
            serde_json::Value::Null,
        ),
        Ok(p) => {
            let lag_ms = p.lag_ms(now);
            let detail = json!({
                "lag_ms": lag_ms, "lag_rows": p.lag_rows(), "floor_block": p.floor_block,
            });
            if lag_ms > MAX_LAG_MS {
                Check::fail(
                    format!(
                        "clickhouse is {} s behind the hot ledger ({} rows): history is delayed, delivery is not",
                        lag_ms / 1_000,
                        p.lag_rows()
                    ),
                    detail,
                )
            } else {
                Check::pass(detail)
            }
        }
    }
}
