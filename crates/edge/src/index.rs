//! The subscription index of an edge's sessions: reloaded on every change notification
//! (`LISTEN pmw_subscriptions` on a dedicated session) and at least every
//! `PMW_EDGE_INDEX_REFRESH_MS`, then handed to the hub, which replaces sessions' wallet sets by
//! a newer index only and closes the sessions of revoked keys and disabled accounts.

use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::channels;
use pmw_core::pg::{self, PgPool};
use pmw_core::CoreConfig;
use pmw_session::hub::Hub;
use pmw_session::subs::Subscriptions;
use tokio_util::sync::CancellationToken;

/// Keep `hub`'s sessions on the current index until `shutdown`.
pub async fn run(
    cfg: CoreConfig,
    pool: PgPool,
    hub: Hub,
    every: Duration,
    shutdown: CancellationToken,
) {
    let subs = Subscriptions::default();
    let mut backoff = Backoff::new(Policy::STORE);
    let mut listen: Option<pg::Session> = None;
    loop {
        if listen.as_ref().is_none_or(|s| s.is_lost()) {
            listen = match pg::listening(&cfg, "pmw-edge:listen", &[channels::SUBSCRIPTIONS]).await
            {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot LISTEN for subscription changes; polling the index meanwhile");
                    None
                }
            };
        }
        match subs.reload(&pool).await {
            Ok(idx) => {
                backoff.reset();
                let closed = hub.apply(&idx);
                if closed > 0 {
                    tracing::info!(
                        closed,
                        version = idx.version,
                        "sessions closed by the index (revoked or disabled)"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_within_ms = backoff.ceiling().as_millis() as u64, "subscription index reload failed")
            }
        }
        let wait = if backoff.failures() > 0 {
            backoff.next_wait().min(every)
        } else {
            every
        };
        let woken = async {
            match listen.as_mut() {
                Some(s) => {
                    let _ = s.notifications.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = woken => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
