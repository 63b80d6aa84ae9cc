//! The finalized watermark: follows the chain's `finalized` tag (Polygon's milestones) and
//! records, fenced by the live writer lock, the highest ingested block it covers. It never
//! moves back and is never above the ingest watermark; a block is recorded only when its
//! stored hash is the canonical one. Push's finality lane sends `final` events behind it, and
//! ingest's unwind refuses to retract below it (an alarm, not a retract).

use std::time::Duration;

use pmw_core::lock::{fence_sql, keys};
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio_util::sync::CancellationToken;

use crate::chain::{hex32, Chain};
use crate::error::IngestError;
use crate::notifier::BlockNotifier;

/// Follows the `finalized` tag every `poll`.
pub struct Finality {
    pub chain: Chain,
    pub pg: PgPool,
    pub lock_epoch: i64,
    pub poll: Duration,
    pub notifier: BlockNotifier,
    advance_sql: String,
}

impl Finality {
    pub fn new(
        chain: Chain,
        pg: PgPool,
        lock_epoch: i64,
        poll: Duration,
        notifier: BlockNotifier,
    ) -> Finality {
        let advance_sql = include_str!("sql/advance_finalized.sql")
            .replace("{fence}", &fence_sql(keys::LIVE, "$4"));
        Finality {
            chain,
            pg,
            lock_epoch,
            poll,
            notifier,
            advance_sql,
        }
    }

    /// Poll until `shutdown`; failures are logged and retried at the next poll.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            match self.step().await {
                Ok(_) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "finality step failed; retrying");
                }
                Err(e) => tracing::debug!(error = %e, "finality step failed again"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
    }

    /// One step: the block the watermark moved to, if it moved.
    pub async fn step(&self) -> Result<Option<u64>, IngestError> {
        let Some(fin) = self.chain.finalized().await? else {
            return Ok(None);
        };
        let client = self.pg.get().await?;
        let sql = client
            .prepare_cached(include_str!("sql/finality_state.sql"))
            .await?;
        let state = client.query_one(&sql, &[&(fin.number as i64)]).await?;
        let Some(ingested) = state.get::<_, Option<i64>>(0).map(|n| n as u64) else {
            return Ok(None);
        };
        let current = state.get::<_, Option<i64>>(1).map(|n| n as u64);
        let target = fin.number.min(ingested);
        if current.is_some_and(|c| c >= target) {
            return Ok(None);
        }
        // The canonical hash at `target`: the finalized header's own, or the block below it.
        let hash = if target == fin.number {
            fin.hash
        } else {
            match self.chain.block(target).await? {
                Some(b) => b.hash,
                None => return Ok(None),
            }
        };
        let advance = client.prepare_cached(&self.advance_sql).await?;
        let moved = client
            .execute(
                &advance,
                &[
                    &(target as i64),
                    &hex32(&hash),
                    &UnixMs::now().0,
                    &self.lock_epoch,
                ],
            )
            .await?;
        if moved == 0 {
            // Fenced, or the stored block at `target` is not the finalized one (ingest is about
            // to unwind it): nothing is recorded final until they agree.
            tracing::debug!(target, "finalized watermark not moved");
            return Ok(None);
        }
        crate::telemetry::finalized(target, fin.number);
        tracing::debug!(
            block = target,
            chain_finalized = fin.number,
            "finalized watermark moved"
        );
        self.notifier.notify(ingested);
        Ok(Some(target))
    }
}

/// The recorded finalized watermark (0 when none).
pub async fn watermark(pg: &PgPool) -> Result<u64, IngestError> {
    let client = pg.get().await?;
    let row = client
        .query_opt(
            "SELECT block_number FROM finalized_cursor WHERE id = 1",
            &[],
        )
        .await?;
    Ok(row.map_or(0, |r| r.get::<_, i64>(0) as u64))
}
