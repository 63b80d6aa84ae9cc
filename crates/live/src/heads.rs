//! The head source: new heads over WebSocket, plus an HTTP poll of the latest head running all
//! the time (a silent or dropped subscription can never stall ingest). When the WebSocket drops:
//! `block listener lost`, reconnect with backoff; the poll keeps heads flowing meanwhile.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::chain::{self, Chain, SeenHead};
use pmw_core::redact;
use pmw_core::UnixMs;

/// Settings of the head source. Its `Debug` shows the WebSocket URL's host only ([`redact`]).
#[derive(Clone)]
pub struct HeadSource {
    pub ws_url: String,
    pub poll_interval: Duration,
    pub stall: Duration,
}

impl fmt::Debug for HeadSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadSource")
            .field("ws_url", &redact::Url(&self.ws_url))
            .field("poll_interval", &self.poll_interval)
            .field("stall", &self.stall)
            .finish()
    }
}

impl HeadSource {
    /// Run until `shutdown`, sending heads to `tx`.
    pub async fn run(self, chain: Chain, tx: mpsc::Sender<SeenHead>, shutdown: CancellationToken) {
        let poller = tokio::spawn(poll_heads(
            chain,
            tx.clone(),
            self.poll_interval,
            shutdown.clone(),
        ));
        let mut backoff = Backoff::new(Policy::RPC);
        loop {
            let connected = Arc::new(AtomicBool::new(false));
            let flag = connected.clone();
            let outcome = tokio::select! {
                r = chain::follow_heads(&self.ws_url, &tx, self.stall, move || flag.store(true, Ordering::Relaxed)) => r,
                _ = shutdown.cancelled() => Ok(()),
            };
            if shutdown.is_cancelled() || tx.is_closed() {
                break;
            }
            if connected.load(Ordering::Relaxed) {
                backoff.reset();
            }
            let wait = backoff.next_wait();
            match outcome {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "block listener lost");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        let _ = poller.await;
    }
}

/// Poll the latest head over HTTP every `every` until `stop`, sending each new one.
async fn poll_heads(
    chain: Chain,
    tx: mpsc::Sender<SeenHead>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut last: Option<[u8; 32]> = None;
    // A load-balanced RPC may answer from a node that lags: a head below the highest seen is
    // not news (a real reorg to a shorter branch shows at the next height anyway).
    let mut highest = 0u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match chain.latest().await {
            Ok(head) if last != Some(head.hash) && head.number >= highest => {
                last = Some(head.hash);
                highest = head.number;
                let seen = SeenHead {
                    head,
                    t_detect_ms: UnixMs::now(),
                };
                if tx.send(seen).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "head poll failed"),
        }
    }
}
