//! Reorgs: walk back from the watermark to the common ancestor with the chain, retract the
//! orphaned blocks' trades and move the watermark back to it (never below the finalized one).

use std::collections::BTreeMap;

use pmw_core::UnixMs;

use super::{parse_hash, BlockRef, Ingester};
use crate::chain::{hex32, ChainError};
use crate::error::IngestError;

impl Ingester {
    /// Walk back from the watermark to the newest block whose stored hash is canonical, retract
    /// the trades of every orphaned block above it, and move the watermark back to it.
    #[tracing::instrument(name = "unwind", skip_all, fields(cursor = self.cursor.map(|c| c.number)))]
    pub async fn unwind(&mut self) -> Result<(), IngestError> {
        let tip = self.cursor.expect("unwind needs a cursor");
        let stored = self
            .stored_hashes(tip.number.saturating_sub(self.parts.max_reorg_depth))
            .await?;
        let ancestor = self.common_ancestor(&stored).await?;
        // A finalized trade is never retracted: a chain that disagrees with a finalized block is
        // an alarm (a broken node, or worse), logged and counted; ingest waits for it to agree.
        let finalized = crate::finality::watermark(&self.parts.pg).await?;
        if ancestor.number < finalized {
            metrics::counter!(crate::telemetry::FINALITY_VIOLATIONS).increment(1);
            self.stats.finality_violations += 1;
            return Err(IngestError::BelowFinalized {
                ancestor: ancestor.number,
                finalized,
            });
        }
        let version = self.versions.next_now();
        let depth = tip.number - ancestor.number;
        let (retracted, top) = self.commit_unwind(tip, ancestor, version).await?;
        self.versions.raise(top);
        self.book.retain(|&n, _| n <= ancestor.number);
        self.cursor = Some(ancestor);
        self.parts.notifier.notify(ancestor.number);
        crate::telemetry::reorged(ancestor.number);
        self.stats.reorgs += 1;
        self.stats.retracted += retracted as u64;
        tracing::warn!(
            ancestor = ancestor.number,
            old_tip = tip.number,
            depth,
            retracted,
            "reorg unwound"
        );
        Ok(())
    }

    /// The newest block of `stored` (walking down from the top) whose hash is the chain's.
    async fn common_ancestor(
        &self,
        stored: &BTreeMap<u64, [u8; 32]>,
    ) -> Result<BlockRef, IngestError> {
        for (&number, hash) in stored.iter().rev() {
            // A block the node does not have proves nothing (a lagging node): try again later
            // rather than walk past a block that may well be canonical.
            let c = self
                .parts
                .chain
                .block(number)
                .await?
                .ok_or(IngestError::Chain(ChainError::Rpc(format!(
                    "block {number} not available while looking for the common ancestor"
                ))))?;
            if c.hash == *hash {
                return Ok(BlockRef {
                    number,
                    hash: *hash,
                });
            }
        }
        Err(IngestError::ReorgTooDeep(self.parts.max_reorg_depth))
    }

    /// In one transaction fenced by the live lock: append the orphaned trades' retractions to
    /// the hot ledger (at least `version`), drop the orphaned `chain_blocks`, record the reorg
    /// and move the watermark back to `ancestor`. Returns how many trades were retracted and
    /// the highest version written.
    async fn commit_unwind(
        &self,
        tip: BlockRef,
        ancestor: BlockRef,
        version: u64,
    ) -> Result<(i64, u64), IngestError> {
        let depth = tip.number - ancestor.number;
        let mut client = self.parts.pg.get().await?;
        let tx = client.transaction().await?;
        let row = tx
            .query_one(
                include_str!("../sql/unwind_ledger.sql"),
                &[
                    &(ancestor.number as i64),
                    &(version as i64),
                    &UnixMs::now().0,
                ],
            )
            .await?;
        let (retracted, top): (i64, i64) = (row.get(0), row.get(1));
        tx.execute(
            include_str!("../sql/unwind.sql"),
            &[&(ancestor.number as i64)],
        )
        .await?;
        tx.execute(
            include_str!("../sql/record_reorg.sql"),
            &[
                &(ancestor.number as i64),
                &(tip.number as i64),
                &hex32(&tip.hash),
                &(depth as i32),
                &UnixMs::now().0,
            ],
        )
        .await?;
        let moved = tx
            .execute(
                &self.advance_sql,
                &[
                    &(ancestor.number as i64),
                    &hex32(&ancestor.hash),
                    &UnixMs::now().0,
                    &self.parts.lock.epoch(),
                ],
            )
            .await?;
        if moved != 1 {
            return Err(IngestError::Fenced);
        }
        tx.commit().await?;
        Ok((retracted, (top as u64).max(version)))
    }

    /// Stored canonical hashes from `from` up to the watermark.
    async fn stored_hashes(&self, from: u64) -> Result<BTreeMap<u64, [u8; 32]>, IngestError> {
        let client = self.parts.pg.get().await?;
        let rows = client
            .query(
                "SELECT block_number, block_hash FROM chain_blocks WHERE block_number >= $1 ORDER BY block_number",
                &[&(from as i64)],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, i64>(0) as u64,
                    parse_hash(&r.get::<_, String>(1)),
                )
            })
            .collect())
    }
}
