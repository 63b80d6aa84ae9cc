//! The hot ledger in `pmwctl status`: how far ClickHouse (history) is behind it (the projector's
//! lag in rows and in time, core's one query) and its floor (blocks below it are read from
//! ClickHouse); a warning when the projector lags more than a minute. Delivery never waits for
//! ClickHouse: this lag delays history only.

use pmw_core::exit::ServiceError;
use pmw_core::pg::ledger::{projection, Projection};
use serde_json::{json, Value};

use crate::conn::db_error;

/// A projector lag past this is a warning (history in ClickHouse is that far behind).
pub const LAG_WARN_MS: i64 = 60_000;

/// The projection as JSON at `now`.
pub async fn collect(c: &tokio_postgres::Client, now: i64) -> Result<Value, ServiceError> {
    let p = projection(c).await.map_err(db_error)?;
    Ok(json(&p, now))
}

fn json(p: &Projection, now: i64) -> Value {
    json!({
        "projected_seq": p.projected_seq, "head_seq": p.head_seq,
        "lag_rows": p.lag_rows(), "lag_ms": p.lag_ms(now),
        "floor_block": p.floor_block, "projector_moved_age_ms": now - p.updated_ms,
    })
}

/// A warning when ClickHouse is more than [`LAG_WARN_MS`] behind the hot ledger.
pub fn warnings(v: &Value) -> Vec<String> {
    match v["lag_ms"].as_i64() {
        Some(ms) if ms > LAG_WARN_MS => vec![format!(
            "clickhouse is {} s behind the hot ledger ({} rows not projected): history is delayed, delivery is not; is clickhouse up?",
            ms / 1_000,
            v["lag_rows"]
        )],
        _ => Vec::new(),
    }
}

/// The text line: `ledger        projected (floor block N)` or the lag.
pub fn text(v: &Value) -> String {
    let floor = &v["floor_block"];
    match (v["lag_rows"].as_i64(), v["lag_ms"].as_i64()) {
        (Some(0), _) => {
            format!("ledger        clickhouse caught up (hot ledger from block {floor})")
        }
        (Some(rows), Some(ms)) => format!(
            "ledger        clickhouse {rows} rows / {:.1} s behind (hot ledger from block {floor})",
            ms as f64 / 1_000.0
        ),
        _ => "ledger        unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(projected: i64, head: i64, oldest: Option<i64>) -> Value {
        json(
            &Projection {
                projected_seq: projected,
                head_seq: head,
                floor_block: 7,
                oldest_unprojected_ms: oldest,
                updated_ms: 1_000,
            },
            100_000,
        )
    }

    #[test]
    fn a_lag_over_a_minute_is_a_warning_and_the_line_says_how_far() {
        let caught_up = at(5, 5, None);
        assert!(warnings(&caught_up).is_empty());
        assert_eq!(
            text(&caught_up),
            "ledger        clickhouse caught up (hot ledger from block 7)"
        );
        let behind = at(5, 9, Some(30_000));
        assert_eq!(
            text(&behind),
            "ledger        clickhouse 4 rows / 70.0 s behind (hot ledger from block 7)"
        );
        let w = warnings(&behind);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("clickhouse is 70 s behind the hot ledger (4 rows"),
            "{w:?}"
        );
        assert!(
            warnings(&at(5, 9, Some(50_000))).is_empty(),
            "50 s: no warning"
        );
    }
}
