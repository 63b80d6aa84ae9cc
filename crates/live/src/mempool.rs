//! The pending tier's eyes (docs/SETTLEMENT.md): every provider's pending transactions to the
//! settlement contracts (the exchanges, and the V1 fee modules that proxy to them), decoded into
//! the fills they will emit ([`pmw_core::trade::settle`]). The first sighting of a transaction,
//! from any provider, is passed on with its fills; a later one from another provider is passed
//! on as a [`Sighting::Again`] (per-provider first-seen times). Calldata that does not decode is
//! counted and sampled in the log, never passed on; other calls to those contracts (admin,
//! cancels) are counted only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use pmw_core::backoff::{Backoff, Policy};
use pmw_core::trade::settle::{self, CallError, Domain, Settlement};
use pmw_core::types::Address;
use pmw_core::UnixMs;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::chain::pending::{self, PendingTx, Skipped};
use crate::config::ProviderUrls;

/// How long a transaction hash is remembered (a re-announcement within it is not news).
const REMEMBER: Duration = Duration::from_secs(600);
/// At most one sample log of undecodable calldata per this interval.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// A contract settlements are sent to, and the exchange whose orders it settles (the same
/// address for an exchange; the exchange it proxies to for a fee module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub address: Address,
    pub exchange: Address,
}

/// What the watcher passes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sighting {
    /// A settlement transaction seen for the first time, with the fills it will emit.
    First {
        tx: PendingTx,
        settlement: Settlement,
    },
    /// The same transaction announced by another provider.
    Again {
        hash: [u8; 32],
        provider: usize,
        seen_ms: UnixMs,
    },
}

/// The mempool watcher's settings.
#[derive(Debug, Clone)]
pub struct Watcher {
    pub providers: Vec<ProviderUrls>,
    pub targets: Vec<Target>,
    /// The chain the exchanges hash orders for.
    pub chain_id: u64,
}

impl Watcher {
    /// Runs until `shutdown` (or until `out` closes), following every provider's pool and
    /// reconnecting each under the RPC backoff. A sighting `out` has no room for is dropped and
    /// counted (`pmw_live_pending_queue_full_total`).
    pub async fn run(self, out: mpsc::Sender<Sighting>, shutdown: CancellationToken) {
        let (tx, mut rx) = mpsc::channel::<PendingTx>(4096);
        let stop = shutdown.child_token();
        let addresses: Vec<Address> = self.targets.iter().map(|t| t.address).collect();
        let wanted: Arc<dyn Fn(&Address) -> bool + Send + Sync> =
            Arc::new(move |a: &Address| addresses.contains(a));
        let mut tasks = Vec::new();
        for (i, p) in self.providers.iter().enumerate() {
            let follow = follow(p.clone(), i, wanted.clone(), tx.clone(), stop.clone());
            tasks.push(tokio::spawn(follow));
        }
        drop(tx);
        let mut book = Book::default();
        loop {
            let p = tokio::select! {
                p = rx.recv() => match p { Some(p) => p, None => break },
                _ = shutdown.cancelled() => break,
            };
            let Some(sighting) = book.see(p, &self) else {
                continue;
            };
            // Never wait on the consumer: a full queue drops the sighting (counted).
            match out.try_send(sighting) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    counter!(crate::pending::QUEUE_FULL).increment(1);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
        stop.cancel();
        for t in tasks {
            let _ = t.await;
        }
    }

    fn decode(&self, p: &PendingTx) -> Result<Settlement, CallError> {
        let exchange = self
            .targets
            .iter()
            .find(|t| t.address == p.to)
            .map_or(p.to, |t| t.exchange);
        let domain = Domain {
            chain_id: self.chain_id,
            exchange,
        };
        settle::decode(&p.input, &domain)
    }
}

/// The transactions seen lately, by hash, with the providers that announced each.
#[derive(Default)]
struct Book {
    seen: HashMap<[u8; 32], (UnixMs, Vec<usize>)>,
    last_prune: Option<UnixMs>,
    last_sample: Option<UnixMs>,
}

impl Book {
    fn see(&mut self, p: PendingTx, w: &Watcher) -> Option<Sighting> {
        self.prune(p.seen_ms);
        if let Some((_, providers)) = self.seen.get_mut(&p.hash) {
            if providers.contains(&p.provider) {
                return None;
            }
            providers.push(p.provider);
            return Some(Sighting::Again {
                hash: p.hash,
                provider: p.provider,
                seen_ms: p.seen_ms,
            });
        }
        self.seen.insert(p.hash, (p.seen_ms, vec![p.provider]));
        let provider = provider_name(w, p.provider);
        match w.decode(&p) {
            Ok(settlement) => {
                counter!("pmw_live_pending_settlements_total", "provider" => provider).increment(1);
                counter!("pmw_live_pending_fills_total").increment(settlement.fills.len() as u64);
                Some(Sighting::First { tx: p, settlement })
            }
            Err(CallError::NotSettlement(_)) => {
                counter!("pmw_live_pending_other_calls_total").increment(1);
                None
            }
            Err(e) => {
                let reason = match e {
                    CallError::Short(_) => "short",
                    CallError::Abi { .. } => "abi",
                    _ => "inconsistent",
                };
                counter!("pmw_live_pending_undecodable_total", "reason" => reason).increment(1);
                self.sample(&p, &e);
                None
            }
        }
    }

    /// Logs one undecodable transaction per [`SAMPLE_EVERY`].
    fn sample(&mut self, p: &PendingTx, e: &CallError) {
        let due = self
            .last_sample
            .is_none_or(|t| p.seen_ms.0 - t.0 >= SAMPLE_EVERY.as_millis() as i64);
        if due {
            self.last_sample = Some(p.seen_ms);
            tracing::warn!(
                tx = %format!("0x{}", hex::encode(p.hash)),
                to = %p.to,
                error = %e,
                "pending transaction to a settlement contract does not decode; not announced"
            );
        }
    }

    fn prune(&mut self, now: UnixMs) {
        let every = REMEMBER.as_millis() as i64;
        if self.last_prune.is_some_and(|t| now.0 - t.0 < every / 10) {
            return;
        }
        self.last_prune = Some(now);
        self.seen.retain(|_, (first, _)| now.0 - first.0 < every);
    }
}

fn provider_name(w: &Watcher, i: usize) -> String {
    w.providers
        .get(i)
        .map_or_else(|| i.to_string(), |p| p.name.clone())
}

/// Follows one provider's pool, reconnecting under the RPC backoff, until `stop`.
async fn follow(
    p: ProviderUrls,
    index: usize,
    wanted: Arc<dyn Fn(&Address) -> bool + Send + Sync>,
    tx: mpsc::Sender<PendingTx>,
    stop: CancellationToken,
) {
    let mut backoff = Backoff::new(Policy::RPC);
    loop {
        let name = p.name.clone();
        let on_connected = |full: bool| {
            backoff.reset();
            tracing::info!(provider = %name, full_bodies = full, "pending transaction listener connected");
        };
        let on_skip = |s: Skipped| {
            let reason = match s {
                Skipped::Saturated => "saturated",
                Skipped::Malformed => "malformed",
            };
            counter!("pmw_live_pending_skipped_total", "reason" => reason).increment(1);
        };
        let outcome = tokio::select! {
            r = pending::follow_pending(&p.ws_url, index, wanted.clone(), tx.clone(), on_connected, on_skip) => r,
            _ = stop.cancelled() => return,
        };
        if tx.is_closed() {
            return;
        }
        let wait = backoff.next_wait();
        if let Err(e) = outcome {
            tracing::warn!(provider = %p.name, error = %e, retry_in_ms = wait.as_millis() as u64, "pending transaction listener lost");
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}
