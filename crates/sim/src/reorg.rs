//! Chain reorganisations with anvil's `anvil_reorg`: the last `depth` blocks are replaced by
//! `depth` new blocks on their parent (so newHeads subscribers get a head whose parent hash
//! differs from the block they had at that height). The new branch carries fresh matches and,
//! optionally, the orphaned transactions again; the simulator marks the fills of orphaned
//! blocks `orphaned` and records the new branch's fills with their new block hashes.

use std::collections::HashSet;

use anyhow::{ensure, Context};
use serde::Serialize;

use crate::abi::keccak256;
use crate::emitted::{decode_order_filled, Emitted};
use crate::rpc::{Block, TxRequest};
use crate::sim::{exchange_of, ChainState, SentTx, Sim};
use crate::types::B256;

/// What a reorg replaces and with what.
#[derive(Clone, Debug)]
pub struct ReorgPlan {
    /// Blocks to replace (≥ 1, less than the head's number).
    pub depth: u64,
    /// Fresh matches mined into each new block.
    pub new_matches_per_block: u32,
    /// Also mine every orphaned simulator transaction again (as a real reorg usually
    /// re-includes them), placed by `replay_order`.
    pub replay_orphaned: bool,
    /// Where re-mined transactions go (with `replay_orphaned`).
    pub replay_order: ReplayOrder,
}

/// Where a reorg re-mines the orphaned transactions. The fresh matches of each new block come
/// first in it, so a re-mined fill lands at another log index in any case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayOrder {
    /// At the same offset from the common ancestor, in their old order.
    #[default]
    Same,
    /// In reverse: the newest orphaned block's transactions first, in the first new block.
    Reversed,
    /// All in the last new block (moved to a later block).
    LastBlock,
}

impl ReorgPlan {
    /// `depth` blocks replaced by blocks holding one fresh match each.
    pub fn new(depth: u64) -> ReorgPlan {
        ReorgPlan {
            depth,
            new_matches_per_block: 1,
            replay_orphaned: false,
            replay_order: ReplayOrder::Same,
        }
    }
}

/// A block's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BlockRef {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
}

impl From<&Block> for BlockRef {
    fn from(b: &Block) -> BlockRef {
        BlockRef {
            number: b.number.0,
            hash: b.hash,
            parent_hash: b.parent_hash,
        }
    }
}

/// What a reorg did.
#[derive(Clone, Debug, Serialize)]
pub struct ReorgOutcome {
    /// The head before the reorg.
    pub old_head: BlockRef,
    /// The head right after it.
    pub new_head: BlockRef,
    /// The last block both branches share (as planned: `old_head.number - depth`).
    pub common_ancestor: u64,
    /// Hashes of the blocks that left the canonical chain.
    pub orphaned_blocks: Vec<B256>,
    /// Records newly marked orphaned.
    pub orphaned: Vec<Emitted>,
    /// Fills of the new branch.
    pub added: Vec<Emitted>,
}

impl Sim {
    /// Replaces the last `depth` blocks with `depth` new ones, one fresh match in each.
    pub async fn reorg(&self, depth: u64) -> anyhow::Result<ReorgOutcome> {
        self.reorg_with(ReorgPlan::new(depth)).await
    }

    /// Reorganises the chain per `plan` with `anvil_reorg` and updates the record.
    pub async fn reorg_with(&self, plan: ReorgPlan) -> anyhow::Result<ReorgOutcome> {
        let rpc = &self.inner.rpc;
        let mut state = self.inner.chain.lock().await;
        let old = rpc.latest_block().await?;
        let ancestor = ancestor_of(&plan, old.number.0)?;
        let mut old_hashes = Vec::new();
        for n in ancestor + 1..=old.number.0 {
            old_hashes.push(
                rpc.block(n)
                    .await?
                    .context("old branch block vanished")?
                    .hash,
            );
        }
        let txs = self.branch_txs(&mut state, &plan, ancestor)?;
        rpc.anvil_reorg(plan.depth, &txs)
            .await
            .context("anvil_reorg")?;
        let new = rpc.latest_block().await?;
        tracing::info!(depth = plan.depth, ancestor, old_head = %old.hash, new_head = %new.hash, "reorg");
        let orphaned = self
            .mark_orphaned(&mut state, ancestor, new.number.0)
            .await?;
        let added = self
            .record_branch(&mut state, ancestor, new.number.0)
            .await?;
        if let Some(report) = self.inner.report.lock().expect("report lock").as_mut() {
            report.write(&orphaned)?;
        }
        self.record(&added)?;
        Ok(ReorgOutcome {
            old_head: BlockRef::from(&old),
            new_head: BlockRef::from(&new),
            common_ancestor: ancestor,
            orphaned_blocks: old_hashes,
            orphaned,
            added,
        })
    }

    /// The new branch's transactions, each with its block's offset from the common ancestor:
    /// fresh matches first, then (with `replay_orphaned`) the orphaned ones again.
    fn branch_txs(
        &self,
        state: &mut ChainState,
        plan: &ReorgPlan,
        ancestor: u64,
    ) -> anyhow::Result<Vec<(TxRequest, u64)>> {
        let mut txs: Vec<(TxRequest, u64)> = Vec::new();
        for offset in 0..plan.depth {
            for _ in 0..plan.new_matches_per_block {
                let mut m = state.planner.plan(&self.inner.config);
                let (to, input) = self.wire(&mut m)?;
                state.match_ids.insert(keccak256(&input), m.id);
                txs.push((self.tx_request(to, input, m.makers.len() + 1), offset));
            }
        }
        if plan.replay_orphaned {
            let mut replays: Vec<&SentTx> = state
                .sent
                .values()
                .filter(|t| t.block_number > ancestor)
                .collect();
            replays.sort_by_key(|t| t.block_number);
            if plan.replay_order == ReplayOrder::Reversed {
                replays.reverse();
            }
            for t in replays {
                // Each fill takes at least 7 calldata words: an upper bound for the gas limit.
                let fills = t.input.len() / 224 + 1;
                let offset = replay_offset(plan, ancestor, t.block_number);
                txs.push((self.tx_request(t.to, t.input.clone(), fills), offset));
            }
        }
        txs.sort_by_key(|(_, offset)| *offset);
        Ok(txs)
    }

    /// Mark the fills of blocks no longer canonical (above `ancestor`, up to the new head)
    /// orphaned, and forget their transactions: the records newly marked.
    async fn mark_orphaned(
        &self,
        state: &mut ChainState,
        ancestor: u64,
        head: u64,
    ) -> anyhow::Result<Vec<Emitted>> {
        // Canonical hashes from the first possibly replaced block up to the head.
        let mut canonical = std::collections::HashMap::new();
        for n in ancestor + 1..=head {
            if let Some(b) = self.inner.rpc.block(n).await? {
                canonical.insert(n, b.hash);
            }
        }
        let is_canonical =
            |number: u64, hash: &B256| number <= ancestor || canonical.get(&number) == Some(hash);
        let orphaned: Vec<Emitted> = {
            let mut emitted = self.inner.emitted.lock().expect("emitted lock");
            emitted
                .iter_mut()
                .filter(|e| !e.orphaned && !is_canonical(e.block_number, &e.block_hash))
                .map(|e| {
                    e.orphaned = true;
                    e.clone()
                })
                .collect()
        };
        state
            .sent
            .retain(|_, t| is_canonical(t.block_number, &t.block_hash));
        Ok(orphaned)
    }

    /// Record the simulator's transactions in the new branch (blocks above `ancestor` up to
    /// `head`): their fills, and each as sent.
    async fn record_branch(
        &self,
        state: &mut ChainState,
        ancestor: u64,
        head: u64,
    ) -> anyhow::Result<Vec<Emitted>> {
        let rpc = &self.inner.rpc;
        let known: HashSet<(B256, B256)> = self
            .inner
            .emitted
            .lock()
            .expect("emitted lock")
            .iter()
            .map(|e| (e.tx_hash, e.block_hash))
            .collect();
        let mut added = Vec::new();
        for n in ancestor + 1..=head {
            let block = rpc
                .block_with_txs(n)
                .await?
                .context("new branch block vanished")?;
            for tx in block.transactions {
                let (Some(to), Some(_)) = (tx.to, exchange_of(tx.to)) else {
                    continue;
                };
                if tx.from != self.inner.sender || known.contains(&(tx.hash, block.hash)) {
                    continue;
                }
                let receipt = rpc
                    .receipt(&tx.hash)
                    .await?
                    .context("receipt of a mined tx")?;
                let match_id = state.match_ids.get(&keccak256(&tx.input.0)).copied();
                for log in &receipt.logs {
                    if let Some(fill) = decode_order_filled(log)? {
                        added.push(fill.record(log, match_id));
                    }
                }
                state.sent.insert(
                    tx.hash,
                    SentTx {
                        to,
                        input: tx.input.0,
                        block_number: n,
                        block_hash: block.hash,
                    },
                );
            }
        }
        Ok(added)
    }
}

/// The common ancestor of a reorg of `plan.depth` blocks below `head`.
fn ancestor_of(plan: &ReorgPlan, head: u64) -> anyhow::Result<u64> {
    ensure!(plan.depth >= 1, "reorg depth must be at least 1");
    ensure!(
        plan.depth < head,
        "reorg depth {} reaches genesis (head is {})",
        plan.depth,
        head
    );
    Ok(head - plan.depth)
}

/// The offset from the common ancestor of the new block an orphaned transaction of `block` is
/// mined into again.
fn replay_offset(plan: &ReorgPlan, ancestor: u64, block: u64) -> u64 {
    let same = block - ancestor - 1;
    match plan.replay_order {
        ReplayOrder::Same => same,
        ReplayOrder::Reversed => plan.depth - 1 - same,
        ReplayOrder::LastBlock => plan.depth - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(depth: u64, replay_order: ReplayOrder) -> ReorgPlan {
        ReorgPlan {
            replay_orphaned: true,
            replay_order,
            ..ReorgPlan::new(depth)
        }
    }

    #[test]
    fn the_ancestor_is_depth_below_the_head_and_never_genesis() {
        assert_eq!(ancestor_of(&ReorgPlan::new(3), 10).unwrap(), 7);
        assert!(ancestor_of(&ReorgPlan::new(0), 10).is_err());
        assert!(ancestor_of(&ReorgPlan::new(10), 10).is_err());
    }

    #[test]
    fn replays_land_per_their_order() {
        // Ancestor 7, depth 3: blocks 8, 9, 10 are replaced (offsets 0, 1, 2).
        let at = |order, block| replay_offset(&plan(3, order), 7, block);
        assert_eq!([8, 9, 10].map(|b| at(ReplayOrder::Same, b)), [0, 1, 2]);
        assert_eq!([8, 9, 10].map(|b| at(ReplayOrder::Reversed, b)), [2, 1, 0]);
        assert_eq!([8, 9, 10].map(|b| at(ReplayOrder::LastBlock, b)), [2, 2, 2]);
    }
}
