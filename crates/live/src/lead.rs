//! The leader's work while it holds the live lock: start the followers (finality, audit, names,
//! the notifier, the head source), find where ingest starts, then ingest head after head with
//! its error policy and heartbeat, until shutdown or an error.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::WriterLock;
use pmw_core::stores::Stores;
use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, ServiceError};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::chain::{Chain, ChainError, Head, SeenHead};
use crate::error::IngestError;
use crate::ingest::{BlockRef, IngestParts, Ingester};
use crate::latency_writer::LatencyRows;
use crate::{audit, finality, heads, names, notifier, telemetry, LiveConfig};

const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// `chain_blocks` is pruned at the first heartbeat and then every this many (a minute).
const PRUNE_EVERY_BEATS: u64 = 30;
/// Pause before asking again for a block the node does not have yet.
const NOT_THERE_YET: Duration = Duration::from_millis(50);

/// What the leader holds while it ingests.
pub struct Leader<'a> {
    pub stores: &'a Stores,
    pub heartbeat: &'a Heartbeat,
    pub lock: WriterLock,
    pub latency: LatencyRows,
    pub emitters: crate::emitters::Sink,
    pub shutdown: &'a CancellationToken,
}

/// How a wait ended.
enum Next {
    /// Go on.
    Go,
    /// Shutdown: stop cleanly.
    Stop,
}

fn lock_lost() -> ServiceError {
    ServiceError::transient("live lock session lost")
}

/// Ingest while holding the live lock, until shutdown or an error.
pub async fn lead(
    cfg: CoreConfig,
    live: LiveConfig,
    allow: Allowlist,
    l: Leader<'_>,
) -> Result<(), ServiceError> {
    let providers = live.providers(&cfg)?;
    let quorum = live.quorum(providers.len())?;
    let chain = Chain::with_providers(&providers, live.live_provider_max_lag_blocks, quorum)
        .map_err(|e| ServiceError::Config(e.to_string()))?
        .with_chain_id(live.live_chain_id);
    check_chains(&chain).await?;
    if providers.len() == 1 {
        tracing::warn!("one rpc provider: its word alone makes blocks (configure several, README: provider quorum)");
    }
    // Tasks below stop with `tasks`, which also fires on our own exit.
    let tasks = l.shutdown.child_token();
    let _stop_tasks = tasks.clone().drop_guard();
    if live.live_mempool {
        start_pending(&providers, &live, &allow, &l, &tasks)?;
    }
    let mut ingester = spawn_followers(&chain, &live, allow, &l, &tasks);
    if let Next::Stop = start_cursor(&mut ingester, &chain, &live, &l).await? {
        return Ok(());
    }
    let (tx, heads) = mpsc::channel(1024);
    let source = heads::HeadSource {
        providers,
        poll_interval: live.poll_interval(),
        stall: live.ws_stall(),
    };
    tokio::spawn(source.run(chain, tx, tasks.clone()));
    ingest_heads(&mut ingester, heads, &l).await?;
    if let Err(e) = l.lock.release().await {
        tracing::warn!(error = %e, "releasing the live lock failed (it ends with the session)");
    }
    Ok(())
}

/// Start the notifier, name resolution, finality and (when enabled) the audit under `tasks`;
/// the ingester that works with them.
fn spawn_followers(
    chain: &Chain,
    live: &LiveConfig,
    allow: Allowlist,
    l: &Leader<'_>,
    tasks: &CancellationToken,
) -> Ingester {
    let pg = &l.stores.pg;
    let notifier = notifier::BlockNotifier::spawn(pg.clone(), tasks.clone());
    let names = names::Names::spawn(pg.clone(), live.gamma_url.clone(), tasks.clone());
    let finality = finality::Finality::new(
        chain.clone(),
        pg.clone(),
        l.lock.epoch(),
        live.finalized_poll(),
        notifier.clone(),
    );
    tokio::spawn(finality.run(tasks.clone()));
    let projector = crate::projector::Projector::new(
        pg.clone(),
        l.stores.ch.clone(),
        l.lock.epoch(),
        crate::projector::Settings {
            keep: live.ledger_keep(),
            ..Default::default()
        },
    );
    tokio::spawn(projector.run(tasks.clone()));
    if live.live_audit_enabled {
        let watch = audit::Watch {
            allow: allow.clone(),
            emitters: l.emitters.clone(),
        };
        let audit = audit::Audit::new(
            chain.clone(),
            pg.clone(),
            l.stores.ch.clone(),
            watch,
            l.lock.epoch(),
            live.audit(),
            notifier.clone(),
        );
        tokio::spawn(audit.run(tasks.clone()));
    }
    Ingester::new(IngestParts {
        chain: chain.clone(),
        pg: pg.clone(),
        ch: l.stores.ch.clone(),
        allow,
        notifier,
        latency: l.latency.clone(),
        names,
        lock: l.lock.session(),
        max_reorg_depth: live.live_reorg_max_depth,
        emitters: l.emitters.clone(),
    })
}

/// Start the pending tier's watcher and recorder (`PMW_LIVE_MEMPOOL`) under `tasks`.
fn start_pending(
    providers: &[crate::config::ProviderUrls],
    live: &LiveConfig,
    allow: &Allowlist,
    l: &Leader<'_>,
    tasks: &CancellationToken,
) -> Result<(), ServiceError> {
    let targets = crate::pending::targets(allow, live.live_mempool_fee_modules.as_deref())
        .map_err(|e| ServiceError::Config(format!("PMW_LIVE_MEMPOOL_FEE_MODULES: {e}")))?;
    let settings = crate::pending::Settings {
        providers: providers.to_vec(),
        targets,
        chain_id: live.live_chain_id,
        expire_blocks: live.live_pending_expire_blocks,
        drop_grace_blocks: crate::pending::DROP_GRACE_BLOCKS,
    };
    tracing::info!(
        targets = settings.targets.len(),
        expire_blocks = settings.expire_blocks,
        "pending tier on"
    );
    crate::pending::spawn(settings, l.stores.pg.clone(), tasks.clone())
        .map_err(ServiceError::Config)
}

/// Check every provider's chain id (the head source checks again at each reconnect): one on
/// another chain is not used; with none left (a single provider), startup stops (exit 78). A
/// provider that cannot be asked now is checked when it connects.
async fn check_chains(chain: &Chain) -> Result<(), ServiceError> {
    let n = chain.pool().len();
    let mut wrong = 0;
    for i in 0..n {
        match chain.check_chain(i).await {
            Ok(()) => {}
            Err(e @ ChainError::WrongChain { .. }) => {
                wrong += 1;
                if wrong == n {
                    return Err(ServiceError::Config(e.to_string()));
                }
            }
            Err(e) => {
                tracing::warn!(provider = chain.pool().name(i), error = %e, "cannot check the provider's chain id yet")
            }
        }
    }
    Ok(())
}

/// Load the watermark (retrying until it reads); without one, start below
/// `PMW_LIVE_START_BLOCK` when set.
async fn start_cursor(
    ingester: &mut Ingester,
    chain: &Chain,
    live: &LiveConfig,
    l: &Leader<'_>,
) -> Result<Next, ServiceError> {
    let mut backoff = Backoff::new(Policy::STORE);
    while let Err(e) = ingester.load_cursor().await {
        tracing::warn!(error = %e, retry_within_ms = backoff.ceiling().as_millis() as u64, "cannot read the ingest watermark; retrying");
        if let Next::Stop = sleep_or_stop(&mut backoff, l).await? {
            return Ok(Next::Stop);
        }
    }
    if ingester.cursor.is_none() {
        if let Some(start) = live.live_start_block.filter(|s| *s > 0) {
            let mut backoff = Backoff::new(Policy::RPC);
            loop {
                match chain.block(start - 1).await {
                    Ok(Some(h)) => {
                        ingester.cursor = Some(BlockRef {
                            number: h.number,
                            hash: h.hash,
                        });
                        break;
                    }
                    // Providers have it but too few agree yet: wait for a quorum.
                    Ok(None) if chain.pool().waiting_on() == Some(start - 1) => {
                        if let Next::Stop = sleep_or_stop(&mut backoff, l).await? {
                            return Ok(Next::Stop);
                        }
                    }
                    _ => {
                        return Err(ServiceError::Config(format!(
                            "start block {start} is not on the chain"
                        )))
                    }
                }
            }
        }
    }
    if let Some(c) = ingester.cursor {
        metrics::gauge!(telemetry::WATERMARK).set(c.number as f64);
    }
    tracing::info!(cursor = ?ingester.cursor.map(|c| c.number), "ingesting");
    Ok(Next::Go)
}

/// Ingest toward the newest head seen, beating the heartbeat, until shutdown (`Ok`) or an
/// error.
async fn ingest_heads(
    ingester: &mut Ingester,
    mut heads: mpsc::Receiver<SeenHead>,
    l: &Leader<'_>,
) -> Result<(), ServiceError> {
    let lost = l.lock.lost();
    let mut target: Option<Head> = None;
    let mut beats = Beats::new(Instant::now());
    let mut backoff = Backoff::new(Policy::RPC);
    loop {
        if target.is_none() {
            tokio::select! {
                biased;
                _ = l.shutdown.cancelled() => break,
                h = heads.recv() => match h {
                    Some(seen) => { target = Some(seen.head.clone()); ingester.saw(seen); }
                    None if l.shutdown.is_cancelled() => break,
                    None => return Err(ServiceError::Bug(anyhow::anyhow!("head source stopped"))),
                },
                _ = lost.cancelled() => return Err(lock_lost()),
                _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
            }
        }
        // Take every head already queued: the newest is the target, all are remembered.
        while let Ok(seen) = heads.try_recv() {
            target = Some(seen.head.clone());
            ingester.saw(seen);
        }
        if let Some(t) = target.clone() {
            let outcome = tokio::select! {
                r = ingester.advance(&t) => r,
                _ = l.shutdown.cancelled() => break,
                _ = lost.cancelled() => return Err(lock_lost()),
            };
            let next = match outcome {
                Ok(()) => {
                    backoff.reset();
                    reached_or_pause(ingester, &t, &mut target, l.shutdown).await
                }
                Err(e) => on_error(e, ingester, &mut backoff, l).await?,
            };
            if let Next::Stop = next {
                break;
            }
        }
        if let Some(prune) = beats.due(Instant::now()) {
            beat(ingester, l, prune).await;
        }
    }
    Ok(())
}

/// After a successful step: the target is done once the watermark reaches it; otherwise the
/// node does not have the next block yet (a lagging one behind a load balancer): ask again
/// shortly, not in a tight loop.
async fn reached_or_pause(
    ingester: &Ingester,
    t: &Head,
    target: &mut Option<Head>,
    shutdown: &CancellationToken,
) -> Next {
    if ingester.cursor.is_some_and(|c| c.number >= t.number) {
        // Heads can arrive out of order (a poll ahead of a slow subscription, or two providers):
        // the target is the newest arrival, so a higher head seen before it is still owed.
        // Without this, ingest waited for the next block to be announced (a CI run: 60 s at
        // block 112 of 113, anvil mining nothing more).
        *target = ingester.owed_head();
        return Next::Go;
    }
    tokio::select! {
        _ = tokio::time::sleep(NOT_THERE_YET) => Next::Go,
        _ = shutdown.cancelled() => Next::Stop,
    }
}

/// The error policy of an ingest step: a fenced write or a reorg deeper than the window ends
/// the leader; anything else is counted, logged and retried after the backoff.
async fn on_error(
    e: IngestError,
    ingester: &Ingester,
    backoff: &mut Backoff,
    l: &Leader<'_>,
) -> Result<Next, ServiceError> {
    match e {
        IngestError::Fenced => {
            return Err(ServiceError::transient("live lock lost (fenced write)"))
        }
        IngestError::ReorgTooDeep(_) => return Err(ServiceError::Bug(anyhow::anyhow!(e))),
        IngestError::BelowFinalized { .. } => {
            metrics::counter!(telemetry::INGEST_ERRORS).increment(1);
            tracing::error!(error = %e, retry_within_ms = backoff.ceiling().as_millis() as u64, "the chain disagrees with a finalized block: nothing retracted; retrying");
        }
        _ => {
            metrics::counter!(telemetry::INGEST_ERRORS).increment(1);
            tracing::warn!(error = %e, cursor = ?ingester.cursor.map(|c| c.number), retry_within_ms = backoff.ceiling().as_millis() as u64, "ingest step failed; retrying");
        }
    }
    sleep_or_stop(backoff, l).await
}

/// When the heartbeat is due, and whether `chain_blocks` is pruned with it.
struct Beats {
    last: Instant,
    count: u64,
}

impl Beats {
    /// Due at once.
    fn new(now: Instant) -> Beats {
        Beats {
            last: now - HEARTBEAT_EVERY,
            count: 0,
        }
    }

    /// `Some(prune)` when a beat is due at `now` (counting it), else `None`.
    fn due(&mut self, now: Instant) -> Option<bool> {
        if now.duration_since(self.last) < HEARTBEAT_EVERY {
            return None;
        }
        self.last = now;
        self.count += 1;
        Some(self.count % PRUNE_EVERY_BEATS == 1)
    }
}

/// Prune `chain_blocks` when asked, then beat the heartbeat with the ingest state.
async fn beat(ingester: &Ingester, l: &Leader<'_>, prune: bool) {
    if prune {
        if let Err(e) = ingester.prune().await {
            tracing::warn!(error = %e, "chain_blocks prune failed");
        }
    }
    let state = serde_json::json!({
        "role": "leader",
        "epoch": l.lock.epoch(),
        "state": "ingesting",
        "cursor": ingester.cursor.map(|c| c.number),
        "head": ingester.head,
        "stats": ingester.stats,
        "notify_sent": ingester.parts.notifier.stats.sent.load(Ordering::Relaxed),
        "latency_rows_lost": l.latency.lost.load(Ordering::Relaxed),
        "providers": ingester.parts.chain.pool().snapshot(),
        "rpc_quorum": ingester.parts.chain.pool().quorum_snapshot(),
    });
    if let Err(e) = l.heartbeat.beat(&state).await {
        tracing::warn!(error = %e, "heartbeat failed");
    }
}

/// Sleep the next backoff (the one policy, `pmw_core::backoff`) unless shutdown (`Stop`) or
/// lock loss (`Err`).
async fn sleep_or_stop(backoff: &mut Backoff, l: &Leader<'_>) -> Result<Next, ServiceError> {
    let wait = backoff.next_wait();
    let lost = l.lock.lost();
    tokio::select! {
        _ = tokio::time::sleep(wait) => Ok(Next::Go),
        _ = l.shutdown.cancelled() => Ok(Next::Stop),
        _ = lost.cancelled() => Err(lock_lost()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_beat_is_due_at_once_and_prunes() {
        let t0 = Instant::now();
        let mut b = Beats::new(t0);
        assert_eq!(b.due(t0), Some(true));
        assert_eq!(b.due(t0 + Duration::from_millis(1_999)), None);
    }

    #[test]
    fn prunes_every_thirtieth_beat() {
        let t0 = Instant::now();
        let mut b = Beats::new(t0);
        let pruned: Vec<u64> = (0..61u32)
            .filter_map(|i| {
                let due = b.due(t0 + HEARTBEAT_EVERY * i);
                assert!(due.is_some(), "beat {i} is due");
                due.filter(|p| *p).map(|_| u64::from(i) + 1)
            })
            .collect();
        assert_eq!(pruned, vec![1, 31, 61]);
    }
}
