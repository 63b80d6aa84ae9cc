//! The projector: a task under the live writer lock that copies the hot ledger into ClickHouse
//! (`trades`, `trades_by_wallet`) in seq (commit) order, in batches, and moves the fenced
//! `stored_cursor` after each batch is fully written. A crash between the insert and the move
//! re-inserts the same rows with the same versions: harmless (`ReplacingMergeTree`). While
//! ClickHouse is down, ingest and push go on (they never wait for it); the projector retries
//! under the store policy and catches up afterwards. Its lag is a metric and in `pmwctl status`.
//!
//! Once per leadership, before projecting, ClickHouse rows above the ingest watermark are
//! retracted: a writer from before the hot ledger inserted into ClickHouse before committing, so
//! rows it never committed may sit there, and readers take ClickHouse's rows once the floor
//! passes them (projected rows above the watermark, of blocks a reorg unwound, are retracted in
//! the ledger too: a second retraction is harmless).
//!
//! Retention: the hot ledger's floor rises one partition at a time, once the partition's rows
//! are all projected, finalized, audited and older than the retention window; the partitions
//! below the floor are dropped whole (detached concurrently, then dropped) a grace period after
//! the floor passed them, so a reader that read the old floor never finds its partition gone.

use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::ch::{trades, ChClient, TradeRow};
use pmw_core::lock::{fence_sql, keys};
use pmw_core::pg::ledger::{self, PARTITION_BLOCKS};
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio_util::sync::CancellationToken;

use crate::error::IngestError;

/// Rows not yet in ClickHouse (gauge).
pub const LAG_ROWS: &str = "pmw_live_projector_lag_rows";
/// Age of the oldest row not yet in ClickHouse, seconds (gauge; 0 when caught up).
pub const LAG_SECONDS: &str = "pmw_live_projector_lag_seconds";
/// Projector batches that failed (counter).
pub const FAILURES: &str = "pmw_live_projector_failures_total";

/// How the projector runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Rows per ClickHouse insert, at most.
    pub batch: u64,
    /// The pause when caught up.
    pub idle: Duration,
    /// Hot-ledger retention: a partition leaves once its newest block is older than this.
    pub keep: Duration,
    /// Partitions below the floor are dropped this long after the floor passed them.
    pub grace: Duration,
    /// How often retention is looked at.
    pub retain_every: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            batch: 5_000,
            idle: Duration::from_millis(200),
            keep: Duration::from_secs(24 * 3_600),
            grace: Duration::from_secs(60),
            retain_every: Duration::from_secs(60),
        }
    }
}

/// Where the projector stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// stored_cursor: every row up to this seq is in ClickHouse.
    pub projected: i64,
    /// The last seq allocated.
    pub head: i64,
    pub floor: u64,
    pub floor_ms: i64,
    /// Commit time of the oldest row not yet projected.
    pub oldest_ms: Option<i64>,
}

pub struct Projector {
    pg: PgPool,
    ch: ChClient,
    lock_epoch: i64,
    settings: Settings,
    rows_sql: String,
    advance_sql: String,
    floor_sql: String,
}

impl Projector {
    pub fn new(pg: PgPool, ch: ChClient, lock_epoch: i64, settings: Settings) -> Projector {
        let fenced = |text: &str| text.replace("{fence}", &fence_sql(keys::LIVE, "$3"));
        Projector {
            pg,
            ch,
            lock_epoch,
            settings,
            rows_sql: include_str!("sql/project_rows.sql").replace("{COLUMNS}", TradeRow::COLUMNS),
            advance_sql: fenced(include_str!("sql/project_advance.sql")),
            floor_sql: fenced(include_str!("sql/raise_floor.sql")),
        }
    }

    /// Project until `shutdown`: batch after batch while rows wait, else every `idle`; failures
    /// are retried under the store policy; retention every `retain_every`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(Policy::STORE);
        let mut retained_at: Option<tokio::time::Instant> = None;
        let mut swept = false;
        loop {
            let stepped = if swept {
                self.step().await
            } else {
                self.sweep().await.map(|()| {
                    swept = true;
                    true
                })
            };
            let pause = match stepped {
                Ok(more) => {
                    if backoff.failures() > 0 {
                        tracing::info!("projector caught up with clickhouse again");
                    }
                    backoff.reset();
                    if more {
                        Duration::ZERO
                    } else {
                        self.settings.idle
                    }
                }
                Err(e) => {
                    metrics::counter!(FAILURES).increment(1);
                    let wait = backoff.next_wait();
                    if backoff.failures() == 1 {
                        tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "projector batch failed; retrying");
                    } else {
                        tracing::debug!(error = %e, retry_in_ms = wait.as_millis() as u64, "projector batch failed again");
                    }
                    wait
                }
            };
            if retained_at.is_none_or(|t| t.elapsed() >= self.settings.retain_every) {
                retained_at = Some(tokio::time::Instant::now());
                if let Err(e) = self.retain().await {
                    tracing::warn!(error = %e, "ledger retention failed; retrying later");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Retract what ClickHouse shows above the ingest watermark (see the module's comment).
    pub async fn sweep(&self) -> Result<(), IngestError> {
        let c = self.pg.get().await?;
        let watermark = pmw_core::pg::watermark(&**c).await?.unwrap_or(0);
        drop(c);
        // Each retraction just above the row it retracts (version 0 as the floor): below any
        // version a later commit of the same identity gets from the clock.
        let (rows, _) = trades::retract_above(&self.ch, watermark, 0).await?;
        if !rows.is_empty() {
            tracing::warn!(
                watermark,
                retracted = rows.len(),
                "clickhouse rows above the watermark retracted"
            );
        }
        Ok(())
    }

    /// Where the projector stands (and the lag gauges).
    pub async fn standing(&self) -> Result<Standing, IngestError> {
        let c = self.pg.get().await?;
        let sql = c
            .prepare_cached(include_str!("sql/project_state.sql"))
            .await?;
        let r = c.query_one(&sql, &[]).await?;
        let s = Standing {
            projected: r.get(0),
            floor: r.get::<_, i64>(1) as u64,
            floor_ms: r.get(2),
            head: r.get(3),
            oldest_ms: r.get(4),
        };
        let age = s.oldest_ms.map_or(0, |t| (UnixMs::now().0 - t).max(0));
        metrics::gauge!(LAG_ROWS).set((s.head - s.projected).max(0) as f64);
        metrics::gauge!(LAG_SECONDS).set(age as f64 / 1_000.0);
        Ok(s)
    }

    /// Project one batch: true when a full batch was written (more may wait).
    pub async fn step(&self) -> Result<bool, IngestError> {
        let at = self.standing().await?;
        if at.projected >= at.head {
            return Ok(false);
        }
        let batch = self.settings.batch.min(i64::MAX as u64) as i64;
        let (rows, last) = {
            let c = self.pg.get().await?;
            let sql = c.prepare_cached(&self.rows_sql).await?;
            let read = c.query(&sql, &[&at.projected, &batch]).await?;
            let last: Option<i64> = read.last().map(|r| r.get("seq"));
            let rows: Vec<TradeRow> = read.iter().map(ledger::trade_row).collect();
            (rows, last)
        };
        let Some(last) = last else { return Ok(false) };
        trades::insert_trades(&self.ch, &rows)
            .await
            .inspect_err(|_| crate::telemetry::ch_insert_failed("trades"))?;
        let c = self.pg.get().await?;
        let sql = c.prepare_cached(&self.advance_sql).await?;
        let moved = c
            .query_opt(&sql, &[&last, &UnixMs::now().0, &self.lock_epoch])
            .await?;
        if moved.is_none() {
            return Err(IngestError::Fenced);
        }
        tracing::debug!(rows = rows.len(), seq = last, "ledger projected");
        Ok(rows.len() as i64 >= batch)
    }

    /// Retention, one pass: drop the partitions the floor passed a grace period ago, then raise
    /// the floor past the lowest partition above it when it may leave. What it did.
    pub async fn retain(&self) -> Result<Retained, IngestError> {
        let at = self.standing().await?;
        let now = UnixMs::now().0;
        let mut done = Retained::default();
        let c = self.pg.get().await?;
        let parts = c
            .query(include_str!("sql/ledger_partitions.sql"), &[])
            .await?;
        let grace_over = at.floor_ms <= now - self.settings.grace.as_millis() as i64;
        let mut above = None;
        for p in &parts {
            let name: String = p.get(0);
            let Some(lo) = partition_start(&name) else {
                continue;
            };
            let hi = lo + PARTITION_BLOCKS;
            if hi <= at.floor {
                if grace_over {
                    drop_partition(&c, &name, p.get(1)).await?;
                    done.dropped.push(lo);
                }
            } else if above.is_none() {
                above = Some(hi);
            }
        }
        let Some(hi) = above else { return Ok(done) };
        let oldest_ms = now - self.settings.keep.as_millis() as i64;
        let eligible: bool = c
            .query_one(
                include_str!("sql/floor_eligible.sql"),
                &[&(hi as i64), &oldest_ms],
            )
            .await?
            .get(0);
        if eligible {
            let raised = c
                .query_opt(&self.floor_sql, &[&(hi as i64), &now, &self.lock_epoch])
                .await?;
            if raised.is_some() {
                tracing::info!(
                    floor = hi,
                    "hot ledger floor raised: blocks below are read from clickhouse"
                );
                done.floor = Some(hi);
            }
        }
        Ok(done)
    }
}

/// What a retention pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retained {
    /// First blocks of the partitions dropped.
    pub dropped: Vec<u64>,
    /// The new floor, when it rose.
    pub floor: Option<u64>,
}

/// The first block of a partition named `ledger_p<12 digits>`.
fn partition_start(name: &str) -> Option<u64> {
    name.strip_prefix("ledger_p")?.parse().ok()
}

/// Detach (concurrently: reads and commits go on) and drop one partition below the floor. An
/// interrupted detach is finished first.
async fn drop_partition(
    c: &tokio_postgres::Client,
    name: &str,
    pending: bool,
) -> Result<(), tokio_postgres::Error> {
    // `name` is ledger_p + digits (checked by partition_start): safe to splice.
    let how = if pending { "FINALIZE" } else { "CONCURRENTLY" };
    c.batch_execute(&format!("ALTER TABLE ledger DETACH PARTITION {name} {how}"))
        .await?;
    c.batch_execute(&format!("DROP TABLE {name}")).await?;
    tracing::info!(partition = name, "hot ledger partition dropped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::partition_start;

    #[test]
    fn partition_names_give_their_first_block() {
        assert_eq!(partition_start("ledger_p000000010000"), Some(10_000));
        assert_eq!(partition_start("ledger_p000000000000"), Some(0));
        assert_eq!(partition_start("ledger_pX"), None);
        assert_eq!(partition_start("other"), None);
    }
}
