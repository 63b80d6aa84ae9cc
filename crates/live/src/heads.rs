//! The head source: per provider, new heads over WebSocket plus an HTTP poll of its latest head
//! running all the time (a silent or dropped subscription can never stall ingest), raced: the
//! first announcement of a block hash, from any provider, is the one ingest gets (it stamps
//! `t_detect_ms`); later ones are only recorded ([`crate::providers`]). When a WebSocket drops:
//! `block listener lost`, reconnect under the one RPC backoff (`pmw_core::backoff`); a failing
//! poll backs off the same way. Both report to the pool, which demotes and promotes. Each
//! (re)connect first checks the provider's chain id ([`Chain::check_chain`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::chain::{self, Chain, SeenHead};
use crate::config::ProviderUrls;
use pmw_core::UnixMs;

/// Settings of the head source. Its `Debug` shows the URLs' hosts only.
#[derive(Clone)]
pub struct HeadSource {
    /// In the chain's pool order (index = provider).
    pub providers: Vec<ProviderUrls>,
    pub poll_interval: Duration,
    pub stall: Duration,
}

impl fmt::Debug for HeadSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadSource")
            .field("providers", &self.providers)
            .field("poll_interval", &self.poll_interval)
            .field("stall", &self.stall)
            .finish()
    }
}

/// A head from provider `.0`.
type Announced = (usize, SeenHead);

impl HeadSource {
    /// Run until `shutdown`, sending every block hash's first announcement to `tx`.
    pub async fn run(self, chain: Chain, tx: mpsc::Sender<SeenHead>, shutdown: CancellationToken) {
        let (atx, mut arx) = mpsc::channel::<Announced>(1024);
        // The followers stop with `shutdown`, or when ingest stops taking heads.
        let stop = shutdown.child_token();
        let mut tasks = Vec::new();
        for (i, p) in self.providers.iter().enumerate() {
            let follower = Follower {
                chain: chain.clone(),
                provider: i,
                name: p.name.clone(),
                tx: atx.clone(),
                stop: stop.clone(),
            };
            tasks.push(tokio::spawn(
                follower.clone().subscribe(p.ws_url.clone(), self.stall),
            ));
            tasks.push(tokio::spawn(follower.poll(self.poll_interval)));
        }
        drop(atx);
        let pool = chain.pool().clone();
        loop {
            let (i, seen) = tokio::select! {
                a = arx.recv() => match a { Some(a) => a, None => break },
                _ = shutdown.cancelled() => break,
            };
            let h = &seen.head;
            if pool.head_arrived(i, h.hash, h.number, seen.t_detect_ms.0)
                && tx.send(seen).await.is_err()
            {
                break;
            }
        }
        stop.cancel();
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// One provider's head follower: its subscription and its poll.
#[derive(Clone)]
struct Follower {
    chain: Chain,
    provider: usize,
    name: String,
    tx: mpsc::Sender<Announced>,
    stop: CancellationToken,
}

impl Follower {
    /// Follow the provider's `newHeads`, reconnecting under the RPC backoff, until stopped.
    async fn subscribe(self, ws_url: String, stall: Duration) {
        let pool = self.chain.pool().clone();
        let mut backoff = Backoff::new(Policy::RPC);
        loop {
            let connected = Arc::new(AtomicBool::new(false));
            let flag = connected.clone();
            let on_connected = || {
                flag.store(true, Ordering::Relaxed);
                pool.subscription(self.provider, true);
            };
            let follow = async {
                // At every (re)connect: a provider on another chain is not used.
                self.chain.check_chain(self.provider).await?;
                chain::follow_heads(
                    &ws_url,
                    self.provider,
                    &self.name,
                    &self.tx,
                    stall,
                    on_connected,
                )
                .await
            };
            let outcome = tokio::select! {
                r = follow => r,
                _ = self.stop.cancelled() => Ok(()),
            };
            if self.stop.is_cancelled() || self.tx.is_closed() {
                break;
            }
            pool.subscription(self.provider, false);
            if connected.load(Ordering::Relaxed) {
                backoff.reset();
            }
            let wait = backoff.next_wait();
            match outcome {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(provider = %self.name, error = %e, retry_in_ms = wait.as_millis() as u64, "block listener lost");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => break,
            }
        }
    }

    /// Poll the provider's latest head every `every` (after a failure: the RPC backoff),
    /// sending each new one, until stopped.
    async fn poll(self, every: Duration) {
        let pool = self.chain.pool().clone();
        let mut backoff = Backoff::new(Policy::RPC);
        let mut last: Option<[u8; 32]> = None;
        // A load-balanced RPC may answer from a node that lags: a head below the highest seen is
        // not news (a real reorg to a shorter branch shows at the next height anyway).
        let mut highest = 0u64;
        let mut wait = every;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => return,
            }
            let started = tokio::time::Instant::now();
            match self.chain.latest_from(self.provider).await {
                Ok(head) => {
                    pool.answered(
                        self.provider,
                        crate::providers::Kind::Block,
                        started.elapsed(),
                    );
                    backoff.reset();
                    wait = every;
                    if last == Some(head.hash) || head.number < highest {
                        continue;
                    }
                    last = Some(head.hash);
                    highest = head.number;
                    let seen = SeenHead {
                        head,
                        t_detect_ms: UnixMs::now(),
                    };
                    if self.tx.send((self.provider, seen)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    pool.failed(self.provider);
                    wait = backoff.next_wait().max(every);
                    tracing::warn!(provider = %self.name, error = %e, retry_in_ms = wait.as_millis() as u64, "head poll failed");
                }
            }
        }
    }
}
