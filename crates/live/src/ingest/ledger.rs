//! The hot ledger's write side: its block-range partitions (created ahead of the watermark, never
//! on the commit's path more than once per partition) and appending rows in a caller's
//! transaction (the audit's corrections). The block's own trades go in with its commit
//! (`sql/commit_block.sql`), a reorg's retractions with the unwind (`sql/unwind_ledger.sql`).

use pmw_core::ch::TradeRow;
use pmw_core::pg::ledger as core_ledger;
pub use pmw_core::pg::ledger::{partition_of, PARTITION_BLOCKS};
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
    pub fn due(&self, block: u64) -> Vec<(u64, u64)> {
        let own = partition_of(block);
        let mut due = Vec::new();
        if self.upto == 0 || own.0 < self.from || own.1 > self.upto {
            due.push(own);
        }
        if block % PARTITION_BLOCKS >= PARTITION_BLOCKS / 2 && own.1 + PARTITION_BLOCKS > self.upto
        {
            due.push(partition_of(own.1));
        }
        due
    }

    fn made(&mut self, (lo, hi): (u64, u64)) {
        if self.upto == 0 {
            self.from = lo;
        }
        self.from = self.from.min(lo);
        self.upto = self.upto.max(hi);
    }

    /// Create what [`Partitions::due`] names for `block` (idempotent).
    pub async fn ensure(
        &mut self,
        client: &tokio_postgres::Client,
        block: u64,
    ) -> Result<(), tokio_postgres::Error> {
        for (lo, hi) in self.due(block) {
            if core_ledger::ensure_partition(client, (lo, hi)).await? {
                tracing::info!(from = lo, to = hi, "ledger partition created");
            }
            self.made((lo, hi));
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

    #[test]
    fn the_first_block_makes_its_partition_and_the_second_half_the_next() {
        let p = Partitions::default();
        assert_eq!(p.due(12_345), vec![(10_000, 20_000)]);
        assert_eq!(p.due(15_000), vec![(10_000, 20_000), (20_000, 30_000)]);
    }

    #[test]
    fn nothing_is_due_inside_partitions_made_sure_of() {
        let mut p = Partitions::default();
        p.made((10_000, 20_000));
        assert!(p.due(10_000).is_empty());
        assert!(p.due(14_999).is_empty());
        assert_eq!(p.due(15_000), vec![(20_000, 30_000)]);
        p.made((20_000, 30_000));
        assert!(p.due(19_999).is_empty());
        assert!(p.due(20_000).is_empty());
        // A reorg or a start block below what was made: its own partition again.
        assert_eq!(p.due(9_999), vec![(0, 10_000)]);
    }
}
