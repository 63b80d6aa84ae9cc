//! The audit's pure core: compare the fills the chain has with the stored rows of the same
//! blocks ([`compare`]), and the rows that correct the store ([`corrections`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use pmw_core::ch::TradeRow;
use pmw_core::trade::Fill;

/// A fill's key: (block, log index).
pub type Key = (u64, u32);

/// A `chain_blocks` row of an audited range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub hash: String,
    pub count: Option<i32>,
    pub time_ms: i64,
}

/// What the chain and the store disagree on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Fills on the chain that no visible, canonical stored row has.
    pub missing: Vec<Key>,
    /// Indexes into the stored rows: visible rows the chain does not have (or on another hash).
    pub extra: Vec<usize>,
    /// The chain's fills per block (blocks without any are absent).
    pub counts: BTreeMap<u64, i32>,
    /// Blocks to correct: those with findings, and those whose recorded count is wrong (an
    /// earlier audit that stored its rows but lost its lock before recording the rest).
    pub recount: BTreeSet<u64>,
}

/// Compare the chain's fills of the recorded blocks with the latest stored rows of them.
pub fn compare<F>(
    chain: &BTreeMap<Key, F>,
    stored: &[TradeRow],
    recorded: &BTreeMap<u64, Recorded>,
) -> Findings {
    let canonical = |r: &TradeRow| {
        recorded
            .get(&r.block_number)
            .is_some_and(|b| b.hash == r.block_hash)
    };
    let visible: BTreeSet<Key> = stored
        .iter()
        .filter(|r| r.retracted == 0 && canonical(r))
        .map(|r| (r.block_number, r.log_index))
        .collect();
    let missing: Vec<Key> = chain
        .keys()
        .filter(|k| !visible.contains(k))
        .copied()
        .collect();
    let extra: Vec<usize> = stored
        .iter()
        .enumerate()
        .filter(|(_, r)| r.retracted == 0)
        .filter(|(_, r)| !canonical(r) || !chain.contains_key(&(r.block_number, r.log_index)))
        .map(|(i, _)| i)
        .collect();
    let mut counts: BTreeMap<u64, i32> = BTreeMap::new();
    for (block, _) in chain.keys() {
        *counts.entry(*block).or_default() += 1;
    }
    let mut recount: BTreeSet<u64> = missing.iter().map(|k| k.0).collect();
    recount.extend(extra.iter().map(|&i| stored[i].block_number));
    for (n, rec) in recorded {
        let actual = counts.get(n).copied().unwrap_or(0);
        if rec.count.is_some_and(|c| c != actual) {
            recount.insert(*n);
        }
    }
    Findings {
        missing,
        extra,
        counts,
        recount,
    }
}

/// The rows that correct the store at `version`, detected at `now_ms`: each missing fill
/// backfilled (flagged `audit`), each extra row retracted; every row's version is above the one
/// it replaces.
pub fn corrections(
    findings: &Findings,
    chain: &BTreeMap<Key, Fill>,
    stored: &[TradeRow],
    recorded: &BTreeMap<u64, Recorded>,
    version: u64,
    now_ms: i64,
) -> Vec<TradeRow> {
    let prior: HashMap<(u64, u32, &str), u64> = stored
        .iter()
        .map(|r| {
            (
                (r.block_number, r.log_index, r.block_hash.as_str()),
                r.version,
            )
        })
        .collect();
    let mut rows = Vec::with_capacity(findings.missing.len() + findings.extra.len());
    for k in &findings.missing {
        let f = &chain[k];
        let rec = &recorded[&f.block_number];
        let mut r = TradeRow::from_fill(f, rec.time_ms, now_ms, true, version);
        r.audit = 1;
        if let Some(v) = prior.get(&(r.block_number, r.log_index, r.block_hash.as_str())) {
            r.version = r.version.max(v + 1);
        }
        rows.push(r);
    }
    for &i in &findings.extra {
        let mut r = stored[i].clone();
        r.retracted = 1;
        r.version = version.max(r.version + 1);
        rows.push(r);
    }
    rows
}

#[cfg(test)]
mod tests {
    use pmw_core::trade::exchange::AbiVersion;
    use pmw_core::trade::{FeeAsset, Side, U256};
    use pmw_core::types::Address;

    use super::*;

    const A: &str = "0xaa";
    const B: &str = "0xbb";

    fn recorded(blocks: &[(u64, &str, Option<i32>)]) -> BTreeMap<u64, Recorded> {
        blocks
            .iter()
            .map(|&(n, hash, count)| {
                (
                    n,
                    Recorded {
                        hash: hash.into(),
                        count,
                        time_ms: n as i64 * 2_000,
                    },
                )
            })
            .collect()
    }

    fn chain(keys: &[Key]) -> BTreeMap<Key, ()> {
        keys.iter().map(|k| (*k, ())).collect()
    }

    fn row(block: u64, log_index: u32, hash: &str, retracted: u8, version: u64) -> TradeRow {
        TradeRow {
            retracted,
            version,
            ..pmw_testkit::rows::trade(block, log_index, hash)
        }
    }

    #[test]
    fn agreement_finds_nothing() {
        let rec = recorded(&[(10, A, Some(2)), (11, A, None)]);
        let stored = [row(10, 0, A, 0, 1), row(10, 1, A, 0, 1)];
        let f = compare(&chain(&[(10, 0), (10, 1)]), &stored, &rec);
        assert!(f.missing.is_empty() && f.extra.is_empty(), "{f:?}");
        assert!(f.recount.is_empty(), "{f:?}");
        assert_eq!(f.counts, BTreeMap::from([(10, 2)]));
    }

    #[test]
    fn a_chain_fill_the_store_lacks_is_missing() {
        let rec = recorded(&[(10, A, None), (11, A, None)]);
        let stored = [row(10, 0, A, 0, 1)];
        let f = compare(&chain(&[(10, 0), (11, 4)]), &stored, &rec);
        assert_eq!(f.missing, vec![(11, 4)]);
        assert!(f.extra.is_empty());
        assert_eq!(f.recount, BTreeSet::from([11]));
    }

    #[test]
    fn a_retracted_or_orphaned_row_does_not_count_as_stored() {
        let rec = recorded(&[(10, A, None)]);
        // (10, 0) only retracted; (10, 1) stored under another block hash.
        let stored = [row(10, 0, A, 1, 2), row(10, 1, B, 0, 1)];
        let f = compare(&chain(&[(10, 0), (10, 1)]), &stored, &rec);
        assert_eq!(f.missing, vec![(10, 0), (10, 1)]);
        assert_eq!(f.extra, vec![1], "the orphaned row is retracted");
        assert_eq!(f.recount, BTreeSet::from([10]));
    }

    #[test]
    fn a_stored_fill_the_chain_lacks_is_extra() {
        let rec = recorded(&[(10, A, None), (12, A, None)]);
        let stored = [
            row(10, 0, A, 0, 1),
            row(12, 7, A, 0, 1),
            row(12, 8, A, 1, 3),
        ];
        let f = compare(&chain(&[(10, 0)]), &stored, &rec);
        assert!(f.missing.is_empty());
        assert_eq!(f.extra, vec![1], "a row already retracted is not extra");
        assert_eq!(f.recount, BTreeSet::from([12]));
    }

    #[test]
    fn a_wrong_recorded_count_is_recounted_without_findings() {
        let rec = recorded(&[(10, A, Some(1)), (11, A, Some(3)), (12, A, None)]);
        let stored = [row(10, 0, A, 0, 1)];
        let f = compare(&chain(&[(10, 0)]), &stored, &rec);
        assert!(f.missing.is_empty() && f.extra.is_empty(), "{f:?}");
        assert_eq!(
            f.recount,
            BTreeSet::from([11]),
            "block 11 has no fills, not 3"
        );
    }

    fn fill(block: u64, log_index: u32, hash: [u8; 32]) -> Fill {
        Fill {
            exchange: Address([2; 20]),
            version: AbiVersion::V2,
            order_hash: [3; 32],
            maker: Address([4; 20]),
            taker: Address([5; 20]),
            side: Side::Buy,
            token_id: U256::from(1u64),
            shares: U256::from(2_000_000u64),
            collateral: U256::from(1_000_000u64),
            fee: U256::zero(),
            fee_asset: FeeAsset::Collateral,
            block_number: block,
            log_index,
            block_hash: hash,
            tx_hash: [1; 32],
        }
    }

    #[test]
    fn corrections_backfill_missing_and_retract_extra_above_prior_versions() {
        let hash = format!("0x{}", "aa".repeat(32));
        let rec = recorded(&[(10, &hash, None)]);
        let chain = BTreeMap::from([((10, 0), fill(10, 0, [0xaa; 32]))]);
        // (10, 0) was retracted at version 500 (above the audit's 300); (10, 5) is extra at 900.
        let stored = [row(10, 0, &hash, 1, 500), row(10, 5, &hash, 0, 900)];
        let f = compare(&chain, &stored, &rec);
        let rows = corrections(&f, &chain, &stored, &rec, 300, 77);
        assert_eq!(rows.len(), 2);
        let back = &rows[0];
        assert_eq!((back.block_number, back.log_index), (10, 0));
        assert_eq!((back.audit, back.backfilled, back.retracted), (1, 1, 0));
        assert_eq!(back.version, 501, "above the retraction it replaces");
        assert_eq!(back.t_detect_ms, 77);
        assert_eq!(back.block_time_ms, 20_000, "the recorded block time");
        let gone = &rows[1];
        assert_eq!((gone.block_number, gone.log_index), (10, 5));
        assert_eq!(gone.retracted, 1);
        assert_eq!(gone.version, 901);
    }

    #[test]
    fn corrections_use_the_audit_version_when_it_is_higher() {
        let hash = format!("0x{}", "aa".repeat(32));
        let rec = recorded(&[(10, &hash, None)]);
        let chain = BTreeMap::from([((10, 0), fill(10, 0, [0xaa; 32]))]);
        let stored = [row(10, 9, &hash, 0, 4)];
        let f = compare(&chain, &stored, &rec);
        let rows = corrections(&f, &chain, &stored, &rec, 300, 77);
        assert_eq!(
            rows.iter().map(|r| r.version).collect::<Vec<_>>(),
            [300, 300]
        );
    }
}
