//! Settle mode's mempool behaviours (docs/SETTLEMENT.md): a batch of settlements of which some
//! are doomed to revert, some are replaced in the pool by a higher-fee transaction with the
//! same nonce, some are dropped from the pool, and a record ([`Settlement`]) of what each
//! became on chain, read back from the chain rather than assumed.

use std::time::Duration;

use anyhow::{bail, Context};
use pmw_core::Address;
use serde::Serialize;

use crate::abi::keccak256;
use crate::emitted::Emitted;
use crate::plan::{Fate, PlannedMatch};
use crate::rpc::{Bytes, Quantity, TxRequest};
use crate::sim::{check_receipt, ChainState, SentTx, Sim};
use crate::types::B256;

/// How long to wait for the block that settles a batch.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// What one settlement transaction became.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Mined with status 1: its fills are on chain.
    Mined,
    /// Mined with status 0.
    Reverted,
    /// Another transaction with its sender and nonce was mined instead.
    Replaced,
    /// Gone from the pool, never mined.
    Dropped,
}

/// One settlement the simulator sent, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Settlement {
    pub match_id: u64,
    pub tx_hash: B256,
    pub fate: Fate,
    pub outcome: Outcome,
    /// The block that mined it (mined or reverted), or that mined its replacement.
    pub block_number: Option<u64>,
    /// The settlement's fills (planned; on chain only when `outcome` is `Mined`).
    pub fills: usize,
}

struct Sent {
    m: PlannedMatch,
    to: Address,
    input: Vec<u8>,
    hash: B256,
    replacement: Option<B256>,
}

impl Sim {
    /// Sends `n` settlements with their planned fates (doomed-to-vanish ones last), mines them
    /// (automining chains) or waits for the next block, and records each outcome.
    pub(crate) async fn run_settle_batch(
        &self,
        state: &mut ChainState,
        n: u32,
    ) -> anyhow::Result<Vec<Emitted>> {
        let rpc = self.rpc();
        let start = rpc.block_number().await?;
        let automine = rpc.automine().await.unwrap_or(false);
        if automine {
            rpc.set_automine(false).await?;
        }
        let sent = self.send_batch(state, n).await;
        if automine {
            let hold = self.inner.config.hold_ms;
            if hold > 0 && sent.is_ok() {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            let mined = rpc.mine().await;
            rpc.set_automine(true).await?;
            mined?;
        }
        let sent = sent?;
        let deadline = tokio::time::Instant::now() + BLOCK_TIMEOUT;
        while rpc.block_number().await? <= start {
            if tokio::time::Instant::now() >= deadline {
                bail!("no block after a settlement batch in {BLOCK_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut out = Vec::new();
        let mut records = Vec::new();
        for s in sent {
            let (fills, record) = self.outcome(state, s).await?;
            out.extend(fills);
            records.push(record);
        }
        self.record(&out)?;
        self.inner
            .settlements
            .lock()
            .expect("settlements lock")
            .extend(records);
        Ok(out)
    }

    async fn send_batch(&self, state: &mut ChainState, n: u32) -> anyhow::Result<Vec<Sent>> {
        let mut planned = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut m = state.planner.plan(&self.inner.config);
            let (to, input) = self.wire(&mut m)?;
            planned.push((m, to, input));
        }
        // Dropped transactions last, dropped highest nonce first: a dropped nonce never holds
        // up a later transaction of the same sender.
        planned.sort_by_key(|(m, _, _)| m.fate == Fate::Drop);
        let linger = Duration::from_millis(self.inner.config.linger_ms);
        let mut sent = Vec::with_capacity(planned.len());
        // Each replaced settlement comes from an account with nothing else in the pool: anvil
        // loses a replacement that depends on an earlier pool transaction of its sender
        // (mined blocks then skip it and every later nonce).
        let mut spare = self.inner.accounts.iter().filter(|a| **a != self.sender());
        for (m, to, input) in planned {
            let mut req = self.tx_request(to, input.clone(), m.makers.len() + 1);
            let mut replacement = None;
            if m.fate == Fate::Replace {
                req.from = *spare.next().context(
                    "more replaced settlements in one batch than spare unlocked accounts",
                )?;
                let (hash, cancel) = self.send_replaced(&mut req, linger).await?;
                replacement = cancel;
                sent.push(Sent {
                    m,
                    to,
                    input,
                    hash,
                    replacement,
                });
                continue;
            }
            let hash = self.rpc().send_transaction(&req).await?;
            sent.push(Sent {
                m,
                to,
                input,
                hash,
                replacement,
            });
        }
        let drops: Vec<B256> = sent
            .iter()
            .filter(|s| s.m.fate == Fate::Drop)
            .map(|s| s.hash)
            .collect();
        if !drops.is_empty() {
            tokio::time::sleep(linger).await;
            for hash in drops.iter().rev() {
                if let Err(e) = self.rpc().drop_transaction(hash).await {
                    tracing::warn!(tx = %hash, error = %e, "could not drop a settlement (mined already?)");
                }
            }
        }
        Ok(sent)
    }

    /// Sends `req` at the current gas price with an explicit nonce, lets it linger, then sends a
    /// plain transfer to its own sender with the same nonce at three times the price. Returns both hashes (no
    /// replacement if the settlement was mined meanwhile).
    async fn send_replaced(
        &self,
        req: &mut TxRequest,
        linger: Duration,
    ) -> anyhow::Result<(B256, Option<B256>)> {
        let rpc = self.rpc();
        let nonce = rpc.pending_nonce(&req.from).await?;
        let price = rpc.gas_price().await?.max(1);
        req.nonce = Some(Quantity(nonce));
        req.gas_price = Some(Quantity(price));
        let hash = rpc.send_transaction(req).await?;
        tokio::time::sleep(linger).await;
        let cancel = TxRequest {
            from: req.from,
            to: req.from,
            data: Bytes(Vec::new()),
            gas: Quantity(21_000),
            nonce: Some(Quantity(nonce)),
            gas_price: Some(Quantity(price * 3)),
        };
        match rpc.send_transaction(&cancel).await {
            Ok(h) => Ok((hash, Some(h))),
            Err(e) => {
                tracing::warn!(tx = %hash, error = %e, "could not replace a settlement (mined already?)");
                Ok((hash, None))
            }
        }
    }

    /// What became of one sent settlement, from the chain: its receipt, or its replacement's.
    async fn outcome(
        &self,
        state: &mut ChainState,
        s: Sent,
    ) -> anyhow::Result<(Vec<Emitted>, Settlement)> {
        let rpc = self.rpc();
        let mut record = Settlement {
            match_id: s.m.id,
            tx_hash: s.hash,
            fate: s.m.fate,
            outcome: Outcome::Dropped,
            block_number: None,
            fills: s.m.makers.len() + 1,
        };
        if let Some(cancel) = s.replacement {
            let r = rpc
                .wait_receipt(&cancel, BLOCK_TIMEOUT)
                .await
                .context("the replacement transaction")?;
            if rpc.receipt(&s.hash).await?.is_none() {
                record.outcome = Outcome::Replaced;
                record.block_number = Some(r.block_number.0);
                return Ok((Vec::new(), record));
            }
        }
        let Some(receipt) = rpc.receipt(&s.hash).await? else {
            if s.m.fate == Fate::Mine || s.m.fate == Fate::Revert {
                bail!("settlement {} of match {} was not mined", s.hash, s.m.id);
            }
            return Ok((Vec::new(), record));
        };
        record.block_number = Some(receipt.block_number.0);
        if receipt.status.map(|q| q.0) == Some(0) {
            if s.m.fate != Fate::Revert {
                bail!(
                    "settlement {} of match {} reverted unplanned",
                    s.hash,
                    s.m.id
                );
            }
            record.outcome = Outcome::Reverted;
            return Ok((Vec::new(), record));
        }
        if s.m.fate == Fate::Revert {
            bail!(
                "doomed settlement {} of match {} did not revert",
                s.hash,
                s.m.id
            );
        }
        let fills = check_receipt(&s.m, &receipt)?;
        state.match_ids.insert(keccak256(&s.input), s.m.id);
        state.sent.insert(
            s.hash,
            SentTx {
                to: s.to,
                input: s.input,
                block_number: receipt.block_number.0,
                block_hash: receipt.block_hash,
            },
        );
        record.outcome = Outcome::Mined;
        Ok((fills, record))
    }
}
