//! The head source: new heads over WebSocket; when it drops, `block listener lost`, HTTP polling of
//! the head meanwhile, and reconnection with backoff. Owns reconnection end to end.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::chain::{self, Chain, SeenHead};
use pmw_core::UnixMs;

/// Settings of the head source.
#[derive(Debug, Clone)]
pub struct HeadSource {
    pub ws_url: String,
    pub poll_interval: Duration,
    pub stall: Duration,
}

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl HeadSource {
    /// Run until `shutdown`, sending heads to `tx`.
    pub async fn run(self, chain: Chain, tx: mpsc::Sender<SeenHead>, shutdown: CancellationToken) {
        let mut backoff = BACKOFF_MIN;
        loop {
            let polling = CancellationToken::new();
            let poller = tokio::spawn(poll_heads(
                chain.clone(),
                tx.clone(),
                self.poll_interval,
                polling.clone(),
            ));
            let stop_polling = polling.clone();
            let connected = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let was_connected = connected.clone();
            let on_connected = move || {
                stop_polling.cancel();
                connected.store(true, std::sync::atomic::Ordering::Relaxed);
            };
            let outcome = tokio::select! {
                r = chain::follow_heads(&self.ws_url, &tx, self.stall, on_connected) => r,
                _ = shutdown.cancelled() => Ok(()),
            };
            polling.cancel();
            let _ = poller.await;
            if shutdown.is_cancelled() || tx.is_closed() {
                return;
            }
            if was_connected.load(std::sync::atomic::Ordering::Relaxed) {
                backoff = BACKOFF_MIN;
            }
            match outcome {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "block listener lost");
                }
            }
            // Poll over HTTP while waiting to reconnect.
            let polling = CancellationToken::new();
            let poller = tokio::spawn(poll_heads(
                chain.clone(),
                tx.clone(),
                self.poll_interval,
                polling.clone(),
            ));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => {}
            }
            polling.cancel();
            let _ = poller.await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Poll the latest head over HTTP every `every` until `stop`; the first poll waits one period
/// (the WebSocket may connect at once, in which case nothing is polled).
async fn poll_heads(
    chain: Chain,
    tx: mpsc::Sender<SeenHead>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut last: Option<[u8; 32]> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match chain.latest().await {
            Ok(head) if last != Some(head.hash) => {
                last = Some(head.hash);
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
