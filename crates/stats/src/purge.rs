//! Retention of finished Postgres rows: `ws_claims` rows that are `delivered` or `voided`, and
//! `webhook_deliveries` rows that are `delivered` or `failed`, once their `done_ms` is older
//! than their retention. Open claims and pending deliveries are never touched.
//!
//! Deletes are batched: each statement deletes at most `batch` rows, oldest first, found through
//! a partial index on `done_ms` whose predicate is the query's own (migration 4), so no
//! statement holds its row locks for long or scans the live rows; the pooled connection goes
//! back to the pool between statements. The outer query re-checks state and age, so a row that
//! changed meanwhile (a delivery replayed to `pending`) is not deleted.

use std::time::Duration;

use pmw_core::lock::{fence_sql, keys};
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio_util::sync::CancellationToken;

use crate::error::StatsError;

/// How long finished rows are kept, and the batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRetention {
    /// `ws_claims` rows `delivered` or `voided` longer ago than this are deleted.
    pub ws_claims: Duration,
    /// `webhook_deliveries` rows `delivered` or `failed` longer ago than this are deleted.
    pub webhook_deliveries: Duration,
    /// Rows per DELETE statement.
    pub batch: u32,
}

/// What one table's purge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    pub table: &'static str,
    pub rows: u64,
    /// DELETE statements run (each bounded by the batch).
    pub statements: u64,
}

/// One table whose finished rows are purged by batched deletes ([`Job::sql`]).
struct Job {
    table: &'static str,
    /// The finished states, as SQL literals: exactly the partial index's predicate.
    finished: &'static str,
}

impl Job {
    /// The table's batched delete: `$1` = cutoff (ms), `$2` = batch, `$3` = the stats writer
    /// epoch (fenced: a deposed instance deletes nothing).
    fn sql(&self) -> String {
        include_str!("sql/purge_finished.sql")
            .replace("{table}", self.table)
            .replace("{finished}", self.finished)
            .replace("{fence}", &fence_sql(keys::STATS, "$3"))
    }
}

const WS_CLAIMS: Job = Job {
    table: "ws_claims",
    finished: "'delivered', 'voided'",
};

const WEBHOOK_DELIVERIES: Job = Job {
    table: "webhook_deliveries",
    finished: "'delivered', 'failed'",
};

/// Delete the finished rows past their retention, batch by batch, until none is left or `stop`
/// fires (the next run continues). Every statement is fenced by the stats writer `epoch`.
pub async fn purge_finished(
    pg: &PgPool,
    now: UnixMs,
    keep: &RowRetention,
    epoch: i64,
    stop: &CancellationToken,
) -> Result<Vec<Purged>, StatsError> {
    let mut out = Vec::new();
    for (job, age) in [
        (WS_CLAIMS, keep.ws_claims),
        (WEBHOOK_DELIVERIES, keep.webhook_deliveries),
    ] {
        let sql = job.sql();
        let cutoff = now.0 - age.as_millis() as i64;
        let batch = i64::from(keep.batch.max(1));
        let mut done = Purged {
            table: job.table,
            rows: 0,
            statements: 0,
        };
        while !stop.is_cancelled() {
            let n = {
                let c = pg.get().await.map_err(pmw_core::pg::PgError::from)?;
                c.execute(&sql, &[&cutoff, &batch, &epoch]).await?
            };
            done.rows += n;
            done.statements += 1;
            if n < batch as u64 {
                break;
            }
        }
        if done.rows > 0 {
            tracing::info!(
                table = job.table,
                rows = done.rows,
                statements = done.statements,
                "finished rows purged"
            );
        }
        out.push(done);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_delete_carries_its_partial_index_predicate() {
        for (job, states) in [
            (WS_CLAIMS, "('delivered', 'voided')"),
            (WEBHOOK_DELIVERIES, "('delivered', 'failed')"),
        ] {
            let sql = job.sql().split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(!sql.contains('{'), "a hole left unfilled: {sql}");
            let table = job.table;
            for part in [
                // The index's own predicate, then the re-check on the deleted row.
                format!("SELECT id FROM {table} WHERE state IN {states} AND done_ms < $1"),
                format!("AND t.state IN {states} AND t.done_ms < $1"),
            ] {
                assert!(sql.contains(&part), "{part} not in {sql}");
            }
        }
    }
}
