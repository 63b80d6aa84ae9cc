//! pmw-live: follows new block headers, ingests Polymarket fills into ClickHouse, advances the
//! ingest watermark in Postgres and wakes push; follows finality and audits finalized blocks for
//! completeness ([`audit`]). One writer, holding the `live` advisory lock.

pub mod audit;
pub mod chain;
pub mod config;
pub mod failpoint;
pub mod finality;
pub mod heads;
pub mod ingest;
pub mod latency_writer;
pub mod names;
pub mod notifier;
pub mod telemetry;

use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
use pmw_core::stores::Stores;
use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, ServiceError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use config::LiveConfig;
use ingest::{BlockRef, IngestError, Ingester};

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-live";

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// Pause before asking again for a block the node does not have yet.
const NOT_THERE_YET: Duration = Duration::from_millis(50);

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let live: LiveConfig = pmw_core::config::load()?;
    run_with(cfg, live, Allowlist::polymarket(), shutdown).await
}

/// Run with explicit settings (tests run it in-process).
pub async fn run_with(
    cfg: CoreConfig,
    live: LiveConfig,
    allow: Allowlist,
    shutdown: CancellationToken,
) -> Result<(), ServiceError> {
    pmw_core::metrics::start(SERVICE, live.live_metrics_addr, &shutdown).await;
    telemetry::init();
    let stores = Stores::open(&cfg, SERVICE).await?;
    let instance = cfg.instance_or(SERVICE);
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &instance);
    let _ = heartbeat
        .beat(&serde_json::json!({ "state": "waiting for lock" }))
        .await;
    let lock = WriterLock::acquire(
        &cfg,
        &format!("{SERVICE}:lock"),
        keys::LIVE,
        live.lock_segment(),
        &shutdown,
    )
    .await
    .map_err(|e| ServiceError::transient(format!("cannot take the live lock: {e}")))?;
    let Some(lock) = lock else { return Ok(()) };
    let (latency, writer) = latency_writer::LatencyWriter::spawn(stores.ch.clone());
    let result = lead(
        cfg, live, allow, &stores, &heartbeat, lock, latency, &shutdown,
    )
    .await;
    // The ingester (the writer's only sender) is gone: the last latency rows are written now.
    writer.close().await;
    result
}

/// Ingest while holding the live lock, until shutdown or an error.
#[allow(clippy::too_many_arguments)]
async fn lead(
    cfg: CoreConfig,
    live: LiveConfig,
    allow: Allowlist,
    stores: &Stores,
    heartbeat: &Heartbeat,
    lock: WriterLock,
    latency: latency_writer::LatencyRows,
    shutdown: &CancellationToken,
) -> Result<(), ServiceError> {
    let chain =
        chain::Chain::new(&cfg.rpc_http_url).map_err(|e| ServiceError::Config(e.to_string()))?;
    // Tasks below stop with `tasks`, which also fires on our own exit.
    let tasks = shutdown.child_token();
    let _stop_tasks = tasks.clone().drop_guard();
    let notifier = notifier::BlockNotifier::spawn(stores.pg.clone(), tasks.clone());
    let names = names::Names::spawn(stores.pg.clone(), live.gamma_url.clone(), tasks.clone());
    let finality = finality::Finality::new(
        chain.clone(),
        stores.pg.clone(),
        lock.pid(),
        live.finalized_poll(),
        notifier.clone(),
    );
    tokio::spawn(finality.run(tasks.clone()));
    if live.live_audit_enabled {
        let audit = audit::Audit::new(
            chain.clone(),
            stores.pg.clone(),
            stores.ch.clone(),
            allow.clone(),
            lock.pid(),
            live.audit(),
            notifier.clone(),
        );
        tokio::spawn(audit.run(tasks.clone()));
    }
    let mut ingester = Ingester::new(
        chain.clone(),
        stores.pg.clone(),
        stores.ch.clone(),
        allow,
        notifier,
        latency.clone(),
        names,
        lock.pid(),
        live.live_reorg_max_depth,
    );
    let mut backoff = BACKOFF_MIN;
    loop {
        match ingester.load_cursor().await {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ingest watermark; retrying");
                if sleep_or_stop(&mut backoff, shutdown, &lock).await? {
                    return Ok(());
                }
            }
        }
    }
    if ingester.cursor.is_none() {
        if let Some(start) = live.live_start_block.filter(|s| *s > 0) {
            match chain.block(start - 1).await {
                Ok(Some(h)) => {
                    ingester.cursor = Some(BlockRef {
                        number: h.number,
                        hash: h.hash,
                    })
                }
                _ => {
                    return Err(ServiceError::Config(format!(
                        "start block {start} is not on the chain"
                    )))
                }
            }
        }
    }
    if let Some(c) = ingester.cursor {
        metrics::gauge!(telemetry::WATERMARK).set(c.number as f64);
    }
    tracing::info!(cursor = ?ingester.cursor.map(|c| c.number), "ingesting");

    let (tx, mut heads) = mpsc::channel(1024);
    let source = heads::HeadSource {
        ws_url: cfg.rpc_ws_url.clone(),
        poll_interval: live.poll_interval(),
        stall: live.ws_stall(),
    };
    tokio::spawn(source.run(chain, tx, tasks.clone()));

    let lost = lock.lost();
    let mut target = None;
    let mut last_beat = tokio::time::Instant::now() - HEARTBEAT_EVERY;
    let mut rounds = 0u64;
    backoff = BACKOFF_MIN;
    loop {
        if target.is_none() {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                h = heads.recv() => match h {
                    Some(seen) => { target = Some(seen.head.clone()); ingester.saw(seen); }
                    None if shutdown.is_cancelled() => break,
                    None => return Err(ServiceError::Bug(anyhow::anyhow!("head source stopped"))),
                },
                _ = lost.cancelled() => return Err(ServiceError::transient("live lock session lost")),
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
                _ = shutdown.cancelled() => break,
                _ = lost.cancelled() => return Err(ServiceError::transient("live lock session lost")),
            };
            match outcome {
                Ok(()) => {
                    backoff = BACKOFF_MIN;
                    if ingester.cursor.is_some_and(|c| c.number >= t.number) {
                        target = None;
                    } else {
                        // The node does not have the next block yet (a lagging one behind a
                        // load balancer): ask again shortly, not in a tight loop.
                        tokio::select! {
                            _ = tokio::time::sleep(NOT_THERE_YET) => {}
                            _ = shutdown.cancelled() => break,
                        }
                    }
                }
                Err(IngestError::Fenced) => {
                    return Err(ServiceError::transient("live lock lost (fenced write)"))
                }
                Err(e @ IngestError::BelowFinalized { .. }) => {
                    metrics::counter!(telemetry::INGEST_ERRORS).increment(1);
                    tracing::error!(error = %e, "the chain disagrees with a finalized block: nothing retracted; retrying");
                    if sleep_or_stop(&mut backoff, shutdown, &lock).await? {
                        break;
                    }
                }
                Err(e @ IngestError::ReorgTooDeep(_)) => {
                    return Err(ServiceError::Bug(anyhow::anyhow!(e)))
                }
                Err(e) => {
                    metrics::counter!(telemetry::INGEST_ERRORS).increment(1);
                    tracing::warn!(error = %e, cursor = ?ingester.cursor.map(|c| c.number), "ingest step failed; retrying");
                    if sleep_or_stop(&mut backoff, shutdown, &lock).await? {
                        break;
                    }
                }
            }
        }
        if last_beat.elapsed() >= HEARTBEAT_EVERY {
            last_beat = tokio::time::Instant::now();
            rounds += 1;
            if rounds % 30 == 1 {
                if let Err(e) = ingester.prune().await {
                    tracing::warn!(error = %e, "chain_blocks prune failed");
                }
            }
            let state = serde_json::json!({
                "state": "ingesting",
                "cursor": ingester.cursor.map(|c| c.number),
                "head": ingester.head,
                "stats": ingester.stats,
                "notify_sent": ingester.notifier.stats.sent.load(std::sync::atomic::Ordering::Relaxed),
                "latency_rows_lost": latency.lost.load(std::sync::atomic::Ordering::Relaxed),
            });
            if let Err(e) = heartbeat.beat(&state).await {
                tracing::warn!(error = %e, "heartbeat failed");
            }
        }
    }
    if let Err(e) = lock.release().await {
        tracing::warn!(error = %e, "releasing the live lock failed (it ends with the session)");
    }
    Ok(())
}

/// Sleep the current backoff (doubling it) unless shutdown (`Ok(true)`) or lock loss (`Err`).
async fn sleep_or_stop(
    backoff: &mut Duration,
    shutdown: &CancellationToken,
    lock: &WriterLock,
) -> Result<bool, ServiceError> {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    let lost = lock.lost();
    tokio::select! {
        _ = tokio::time::sleep(wait) => Ok(false),
        _ = shutdown.cancelled() => Ok(true),
        _ = lost.cancelled() => Err(ServiceError::transient("live lock session lost")),
    }
}
