//! Retention in ClickHouse: drop whole day partitions of the latency tables (and availability
//! samples) older than the
//! 30-day window plus a margin, and of the webhook `delivery_log` older than its own retention.
//! These tables are partitioned by `intDiv(t_*_ms, 86400000)` (a UTC day number, free of any
//! timezone), so a partition is dropped only when every row it can hold is older than the cutoff.
//! Only `ingest_latency`, `push_latency`, `availability_samples` and `delivery_log` are touched;
//! trades never are.
//! Finished Postgres rows are in [`crate::purge`].

use clickhouse::Row;
use pmw_core::ch::statements;
use pmw_core::ch::ChClient;
use pmw_core::UnixMs;
use serde::Deserialize;

use crate::error::StatsError;
use crate::model::DAY_MS;

/// The latency tables and the availability samples (kept for the dashboard's windows).
pub const TABLES: [&str; 3] = ["ingest_latency", "push_latency", "availability_samples"];
/// The webhook attempt log (kept for the API's delivery log).
pub const DELIVERY_LOG: &str = "delivery_log";

#[derive(Debug, Row, Deserialize)]
struct PartRow {
    table: String,
    partition: String,
    partition_id: String,
}

/// One dropped partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub table: String,
    pub day: i64,
}

/// Exclusive upper bound (ms) of the rows partition `day` can hold. `intDiv` truncates toward
/// zero, so a negative day holds `((day - 1) · DAY, day · DAY]`.
pub fn partition_end_ms(day: i64) -> i64 {
    if day >= 0 {
        day.saturating_add(1).saturating_mul(DAY_MS)
    } else {
        day.saturating_mul(DAY_MS).saturating_add(1)
    }
}

/// Drop the partitions of the latency tables whose rows all lie before `now - keep_days`.
pub async fn drop_expired(
    ch: &ChClient,
    now: UnixMs,
    keep_days: u32,
) -> Result<Vec<Dropped>, StatsError> {
    drop_before(ch, &TABLES, now.0 - i64::from(keep_days) * DAY_MS).await
}

/// Drop the partitions of `delivery_log` whose rows all lie before `now - keep_days`.
pub async fn drop_expired_delivery_log(
    ch: &ChClient,
    now: UnixMs,
    keep_days: u32,
) -> Result<Vec<Dropped>, StatsError> {
    drop_before(ch, &[DELIVERY_LOG], now.0 - i64::from(keep_days) * DAY_MS).await
}

/// Drop the day partitions of `tables` (ours, by constant) that end at or before `cutoff`.
async fn drop_before(
    ch: &ChClient,
    tables: &[&'static str],
    cutoff: i64,
) -> Result<Vec<Dropped>, StatsError> {
    // The names are constants of this module, never input.
    let list = tables
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let parts: Vec<PartRow> = ch
        .query(&statements::ACTIVE_PARTITIONS.replace("{tables}", &list))
        .fetch_all()
        .await?;
    let mut dropped = Vec::new();
    for p in parts {
        let table = tables
            .iter()
            .find(|t| **t == p.table)
            .copied()
            .ok_or_else(|| bad(&p))?;
        let numeric = |s: &str| {
            let digits = s.strip_prefix('-').unwrap_or(s);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        };
        if !numeric(&p.partition_id) {
            return Err(bad(&p));
        }
        let day: i64 = p.partition.parse().map_err(|_| bad(&p))?;
        if partition_end_ms(day) > cutoff {
            continue;
        }
        // The id is a validated integer literal; the table name is one of ours.
        ch.query(
            &statements::DROP_PARTITION
                .replace("{table}", table)
                .replace("{id}", &p.partition_id),
        )
        .execute()
        .await?;
        tracing::info!(table, day, "partition dropped");
        dropped.push(Dropped {
            table: table.to_string(),
            day,
        });
    }
    Ok(dropped)
}

fn bad(p: &PartRow) -> StatsError {
    StatsError::Partition {
        table: p.table.clone(),
        partition: p.partition.clone(),
        id: p.partition_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_ends_follow_int_div_truncation() {
        assert_eq!(partition_end_ms(0), DAY_MS);
        assert_eq!(partition_end_ms(20_424), 20_425 * DAY_MS);
        // intDiv(-86400001, 86400000) = -1: the row must be below the end.
        assert!(-86_400_001 < partition_end_ms(-1));
        assert!(partition_end_ms(-1) <= 0);
    }
}
