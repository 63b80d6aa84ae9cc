//! What readers may see of stored trade versions: the newest version of each identity
//! `(block_number, log_index, block_hash)`, retracted ones dropped, in ledger order. The same
//! rule as the de-duplicating statements (`LIMIT 1 BY … version DESC`, then `retracted = 0`),
//! applied in memory to the raw versions of a small read.

use std::cmp::Reverse;

use super::TradeRow;

/// The visible trades among `versions` (any order), in ledger order, at most `limit`.
pub fn latest_visible(mut versions: Vec<TradeRow>, limit: u64) -> Vec<TradeRow> {
    versions.sort_by(|a, b| {
        (
            a.block_number,
            a.log_index,
            &a.block_hash,
            Reverse(a.version),
        )
            .cmp(&(
                b.block_number,
                b.log_index,
                &b.block_hash,
                Reverse(b.version),
            ))
    });
    versions.dedup_by(|later, first| {
        (later.block_number, later.log_index, &later.block_hash)
            == (first.block_number, first.log_index, &first.block_hash)
    });
    versions.retain(|r| r.retracted == 0);
    versions.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block: u64, log: u32, hash: &str, version: u64, retracted: u8) -> TradeRow {
        TradeRow {
            block_number: block,
            log_index: log,
            block_hash: hash.into(),
            tx_hash: format!("tx-{block}-{log}-{version}"),
            block_time_ms: 0,
            exchange: String::new(),
            exchange_version: 1,
            order_hash: String::new(),
            maker: String::new(),
            taker: String::new(),
            side: 0,
            token_id: String::new(),
            shares: String::new(),
            collateral: String::new(),
            price: String::new(),
            fee: String::new(),
            fee_asset: String::new(),
            t_detect_ms: 0,
            backfilled: 0,
            retracted,
            version,
            audit: 0,
        }
    }

    fn ids(rows: &[TradeRow]) -> Vec<(u64, u32, String, u64)> {
        rows.iter()
            .map(|r| (r.block_number, r.log_index, r.block_hash.clone(), r.version))
            .collect()
    }

    #[test]
    fn the_newest_version_wins_and_retracted_ones_are_dropped() {
        let got = latest_visible(
            vec![
                row(7, 2, "b", 1, 0),
                row(7, 1, "a", 1, 0),
                // Re-inserted after a crash: the newer copy is the one seen.
                row(7, 1, "a", 3, 0),
                // Retracted by a newer version: gone, whatever order the versions came in.
                row(8, 0, "o", 5, 1),
                row(8, 0, "o", 4, 0),
                // A retraction older than a re-insert (the audit stored it again): visible.
                row(9, 4, "c", 6, 1),
                row(9, 4, "c", 8, 0),
            ],
            100,
        );
        assert_eq!(
            ids(&got),
            vec![
                (7, 1, "a".into(), 3),
                (7, 2, "b".into(), 1),
                (9, 4, "c".into(), 8)
            ]
        );
    }

    #[test]
    fn an_orphaned_hash_and_its_replacement_are_distinct_identities() {
        let got = latest_visible(
            vec![
                row(5, 0, "new", 2, 0),
                row(5, 0, "old", 3, 1),
                row(5, 0, "old", 1, 0),
            ],
            100,
        );
        assert_eq!(ids(&got), vec![(5, 0, "new".into(), 2)]);
    }

    #[test]
    fn the_limit_counts_visible_trades_in_ledger_order() {
        let got = latest_visible(
            vec![
                row(3, 0, "h", 1, 1),
                row(2, 5, "h", 1, 0),
                row(2, 1, "h", 1, 0),
                row(4, 0, "h", 1, 0),
            ],
            2,
        );
        assert_eq!(
            ids(&got),
            vec![(2, 1, "h".into(), 1), (2, 5, "h".into(), 1)]
        );
        assert!(latest_visible(Vec::new(), 10).is_empty());
    }
}
