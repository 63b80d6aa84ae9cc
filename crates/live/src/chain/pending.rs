//! Pending transactions over WebSocket, for the pending tier: `eth_subscribe
//! ["newPendingTransactions", true]` where the node sends full bodies (Bor with the `eth`
//! namespace, anvil), else the hash subscription with each body fetched on the same connection
//! (`eth_getTransactionByHash`, bounded: at most [`FETCHES_IN_FLIGHT`] at once, the excess
//! counted and skipped). Only transactions to `wanted` addresses are passed on. [`Probe`]: what
//! the providers say of one pending transaction later (receipt, sender's nonce, pool).

use std::sync::Arc;

use ethers_core::types::{BlockId, BlockNumber, Transaction, H160, H256};
use ethers_providers::{Http, Middleware, Provider, Ws};
use futures::StreamExt;
use pmw_core::types::Address;
use pmw_core::UnixMs;
use serde_json::Value;
use tokio::sync::{mpsc, Semaphore};

use super::{bounded, rpc_error, ChainError};

/// Body fetches in flight per connection when the node sends hashes only.
pub const FETCHES_IN_FLIGHT: usize = 32;

/// A pending transaction to one of the wanted addresses, as first seen on one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTx {
    pub hash: [u8; 32],
    pub from: Address,
    pub nonce: u64,
    pub to: Address,
    pub input: Vec<u8>,
    /// Provider index, and when it announced the transaction.
    pub provider: usize,
    pub seen_ms: UnixMs,
}

/// What a follower could not pass on, for the caller's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// A body fetch was not started: [`FETCHES_IN_FLIGHT`] were already running.
    Saturated,
    /// The node announced something that is not a transaction body or hash.
    Malformed,
}

/// Follows provider `index`'s pending transactions until the connection fails or `tx` closes
/// (then `Ok`). `on_connected` runs once the subscription is live; `on_skip` for each
/// announcement that could not be passed on.
pub async fn follow_pending(
    ws_url: &str,
    index: usize,
    wanted: Arc<dyn Fn(&Address) -> bool + Send + Sync>,
    tx: mpsc::Sender<PendingTx>,
    on_connected: impl FnOnce(bool),
    on_skip: impl Fn(Skipped),
) -> Result<(), ChainError> {
    let provider = Arc::new(bounded(Provider::<Ws>::connect(ws_url)).await?);
    let full = provider
        .subscribe::<_, Value>(("newPendingTransactions", true))
        .await;
    let mut stream = match full {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(error = %rpc_error(e), "no full pending bodies; following hashes");
            let hashes = provider
                .subscribe::<_, Value>(["newPendingTransactions"])
                .await
                .map_err(rpc_error)?;
            on_connected(false);
            return follow_hashes(provider.clone(), hashes, index, wanted, tx, on_skip).await;
        }
    };
    on_connected(true);
    while let Some(item) = stream.next().await {
        let seen_ms = UnixMs::now();
        let parsed = match &item {
            Value::Object(_) => serde_json::from_value::<Transaction>(item).ok(),
            // A node may still send a hash on the full subscription.
            Value::String(h) => {
                let Some(hash) = parse_hash(h) else {
                    on_skip(Skipped::Malformed);
                    continue;
                };
                bounded(provider.get_transaction(hash)).await.ok().flatten()
            }
            _ => None,
        };
        let Some(body) = parsed else {
            on_skip(Skipped::Malformed);
            continue;
        };
        if let Some(p) = pending_of(&body, index, seen_ms, wanted.as_ref()) {
            if tx.send(p).await.is_err() {
                return Ok(());
            }
        }
    }
    Err(ChainError::Rpc(
        "pending transaction subscription ended".into(),
    ))
}

async fn follow_hashes(
    provider: Arc<Provider<Ws>>,
    mut hashes: ethers_providers::SubscriptionStream<'_, Ws, Value>,
    index: usize,
    wanted: Arc<dyn Fn(&Address) -> bool + Send + Sync>,
    tx: mpsc::Sender<PendingTx>,
    on_skip: impl Fn(Skipped),
) -> Result<(), ChainError> {
    let permits = Arc::new(Semaphore::new(FETCHES_IN_FLIGHT));
    while let Some(item) = hashes.next().await {
        let seen_ms = UnixMs::now();
        let Some(hash) = item.as_str().and_then(parse_hash) else {
            on_skip(Skipped::Malformed);
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            on_skip(Skipped::Saturated);
            continue;
        };
        if tx.is_closed() {
            return Ok(());
        }
        let (provider, wanted, tx) = (provider.clone(), wanted.clone(), tx.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Ok(Some(body)) = bounded(provider.get_transaction(hash)).await {
                if let Some(p) = pending_of(&body, index, seen_ms, wanted.as_ref()) {
                    let _ = tx.send(p).await;
                }
            }
        });
    }
    Err(ChainError::Rpc(
        "pending transaction subscription ended".into(),
    ))
}

fn parse_hash(s: &str) -> Option<H256> {
    let bytes = hex::decode(s.strip_prefix("0x")?).ok()?;
    (bytes.len() == 32).then(|| H256::from_slice(&bytes))
}

/// The transaction as pmw keeps it, if it is still pending and goes to a wanted address.
fn pending_of(
    t: &Transaction,
    provider: usize,
    seen_ms: UnixMs,
    wanted: &(dyn Fn(&Address) -> bool + Send + Sync),
) -> Option<PendingTx> {
    let to = Address(t.to?.0);
    if t.block_hash.is_some() || !wanted(&to) {
        return None;
    }
    Some(PendingTx {
        hash: t.hash.0,
        from: Address(t.from.0),
        nonce: t.nonce.low_u64(),
        to,
        input: t.input.to_vec(),
        provider,
        seen_ms,
    })
}

/// A mined transaction's receipt, as far as the pending tier needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mined {
    pub block: u64,
    /// Receipt status 1.
    pub ok: bool,
}

/// What a provider on the ledger's branch says of a transaction at the watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtAnchor {
    /// Its receipt, if mined at or below the watermark.
    pub mined: Option<Mined>,
    /// The sender's mined nonce at the watermark.
    pub nonce_at_w: u64,
}

/// Asks every provider (over HTTP) about transactions seen pending.
#[derive(Clone)]
pub struct Probe {
    providers: Vec<Provider<Http>>,
}

impl Probe {
    pub fn new(urls: &[crate::config::ProviderUrls]) -> Result<Probe, ChainError> {
        let providers = urls
            .iter()
            .map(|u| Provider::<Http>::try_from(u.http_url.as_str()).map_err(rpc_error))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Probe { providers })
    }

    /// What the first provider on the ledger's branch says of transaction `hash` at block `w`,
    /// whose hash the ledger holds as `anchor`: its receipt (if mined at or below `w`) and the
    /// sender's mined nonce at `w`. A provider is on the branch when its block `w` is `anchor`
    /// both before and after the two reads, so they describe one chain, the ledger's: a
    /// provider that has not followed a reorg yet, or one that reorganised between the reads,
    /// says nothing (a nonce from one branch beside a receipt from another once made a mined
    /// settlement look replaced). `Err`: no provider on the branch answered.
    pub async fn at_anchor(
        &self,
        hash: [u8; 32],
        sender: Address,
        w: u64,
        anchor: [u8; 32],
    ) -> Result<AtAnchor, ChainError> {
        let mut error = None;
        for p in &self.providers {
            match on_branch(p, hash, sender, w, anchor).await {
                Ok(Some(seen)) => return Ok(seen),
                Ok(None) => {
                    error = error.or_else(|| {
                        let anchor = hex::encode(anchor);
                        Some(ChainError::Rpc(format!(
                            "no provider holds block {w} as 0x{anchor}"
                        )))
                    })
                }
                Err(e) => error = Some(e),
            }
        }
        Err(error.unwrap_or_else(|| ChainError::Rpc("no provider".into())))
    }

    /// Whether any provider still knows the transaction (pending or mined); `Err` when not
    /// every provider answered and none knows it (a silent provider proves nothing).
    pub async fn known(&self, hash: [u8; 32]) -> Result<bool, ChainError> {
        let mut error = None;
        for p in &self.providers {
            match bounded(p.get_transaction(H256(hash))).await {
                Ok(Some(_)) => return Ok(true),
                Ok(None) => {}
                Err(e) => error = Some(e),
            }
        }
        error.map_or(Ok(false), Err)
    }
}

/// [`Probe::at_anchor`] on one provider: `None` when its block `w` is not `anchor` before or
/// after the reads.
async fn on_branch(
    p: &Provider<Http>,
    hash: [u8; 32],
    sender: Address,
    w: u64,
    anchor: [u8; 32],
) -> Result<Option<AtAnchor>, ChainError> {
    let block = BlockId::Number(BlockNumber::Number(w.into()));
    let on = |b: Option<ethers_core::types::Block<H256>>| {
        b.and_then(|b| b.hash).is_some_and(|h| h.0 == anchor)
    };
    if !on(bounded(p.get_block(block)).await?) {
        return Ok(None);
    }
    let nonce_at_w = bounded(p.get_transaction_count(H160(sender.0), Some(block)))
        .await?
        .as_u64();
    let mined = bounded(p.get_transaction_receipt(H256(hash)))
        .await?
        .and_then(|r| {
            Some(Mined {
                block: r.block_number?.as_u64(),
                ok: r.status.is_some_and(|s| s.as_u64() == 1),
            })
        })
        .filter(|m| m.block <= w);
    if !on(bounded(p.get_block(block)).await?) {
        return Ok(None);
    }
    Ok(Some(AtAnchor { mined, nonce_at_w }))
}
