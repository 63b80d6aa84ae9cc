//! The hot ledger's write side: its block-range partitions (created ahead of the watermark, never
//! on the commit's path more than once per partition) and appending rows in a caller's
//! transaction (the audit's corrections). The block's own trades go in with its commit
//! (`sql/commit_block.sql`), a reorg's retractions with the unwind (`sql/unwind_ledger.sql`).

use pmw_core::ch::TradeRow;
use pmw_core::pg::ledger as core_ledger;
pub use pmw_core::pg::ledger::{partition_of, Partition, PARTITION_BLOCKS};
use pmw_core::UnixMs;

/// Which partitions exist, as far as this writer made sure: blocks below `upto` have one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Partitions {
    /// Exclusive: the end of the highest partition made sure of (0: none yet).
    upto: u64,
    /// The start of the lowest one made sure of.
    from: u64,
}

impl Partitions {
    /// The partitions to create before committing `block`: its own when not yet made sure of,
    /// and the next one once `block` is past the middle of its own (so the commit that crosses
    /// a boundary finds its partition already there).
    pub fn due(&self, block: u64) -> Vec<Partition> {
        let own = partition_of(block);
        let mut due = Vec::new();
        if self.upto == 0 || own.lo < self.from || own.hi > self.upto {
            due.push(own);
        }
        if block % PARTITION_BLOCKS >= PARTITION_BLOCKS / 2 && own.hi + PARTITION_BLOCKS > self.upto
        {
            due.push(partition_of(own.hi));
        }
        due
    }

    fn made(&mut self, p: Partition) {
        if self.upto == 0 {
            self.from = p.lo;
        }
        self.from = self.from.min(p.lo);
        self.upto = self.upto.max(p.hi);
    }

    /// Create what [`Partitions::due`] names for `block` (idempotent).
    pub async fn ensure(
        &mut self,
        client: &tokio_postgres::Client,
        block: u64,
    ) -> Result<(), tokio_postgres::Error> {
        for p in self.due(block) {
            if core_ledger::ensure_partition(client, p).await? {
                tracing::info!(from = p.lo, to = p.hi, "ledger partition created");
            }
            self.made(p);
        }
        Ok(())
    }
}

/// Append `rows` as they are (their versions, retracted flags) in `tx`: an audit's corrections.
pub async fn append(
    tx: &tokio_postgres::Transaction<'_>,
    rows: &[TradeRow],
    now: UnixMs,
) -> Result<u64, tokio_postgres::Error> {
    core_ledger::append(tx, rows, now).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partition from `lo` (the expected values spelled out, not computed by `partition_of`).
    fn part(lo: u64) -> Partition {
        Partition {
            lo,
            hi: lo + 10_000,
        }
    }

    #[test]
    fn the_first_block_makes_its_partition_and_the_second_half_the_next() {
        let p = Partitions::default();
        assert_eq!(p.due(12_345), vec![part(10_000)]);
        assert_eq!(p.due(15_000), vec![part(10_000), part(20_000)]);
    }

    #[test]
    fn nothing_is_due_inside_partitions_made_sure_of() {
        let mut p = Partitions::default();
        p.made(part(10_000));
        assert!(p.due(10_000).is_empty());
        assert!(p.due(14_999).is_empty());
        assert_eq!(p.due(15_000), vec![part(20_000)]);
        p.made(part(20_000));
        assert!(p.due(19_999).is_empty());
        assert!(p.due(20_000).is_empty());
        // A reorg or a start block below what was made: its own partition again.
        assert_eq!(p.due(9_999), vec![part(0)]);
    }
}
