//! pmw-stats: latency aggregates for 1h/24h/7d/30d and the completeness audit's figures
//! ([`audit`]), the public dashboard page (`GET /latency`) and its JSON (`GET /latency.json`), and the retention jobs: latency and `delivery_log` day
//! partitions in ClickHouse ([`retention`]), finished `ws_claims` and `webhook_deliveries` rows
//! in Postgres ([`purge`]). One writer, holding the `stats` advisory lock; it binds its loopback
//! port only once it holds the lock.

pub mod audit;
pub mod charts;
pub mod config;
pub mod error;
pub mod http;
pub mod model;
pub mod page;
pub mod purge;
pub mod query;
pub mod retention;
pub mod snapshot;

use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
use pmw_core::stores::Stores;
use pmw_core::{CoreConfig, ServiceError, UnixMs};
use tokio::sync::oneshot;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

pub use config::StatsConfig;
pub use error::StatsError;
pub use snapshot::Snapshot;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-stats";

/// `pmw_stats_refreshes_total{outcome}`: snapshot recomputations, `ok` or `failed`.
pub const REFRESHES: &str = "pmw_stats_refreshes_total";
/// `pmw_stats_snapshot_timestamp_seconds`: when the published snapshot was computed.
pub const SNAPSHOT_AT: &str = "pmw_stats_snapshot_timestamp_seconds";
/// `pmw_stats_retention_errors_total{job}`: retention jobs that failed.
pub const RETENTION_ERRORS: &str = "pmw_stats_retention_errors_total";

const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
const SERVER_STOP_DEADLINE: Duration = Duration::from_secs(5);

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let stats = StatsConfig::load()?;
    run_with(cfg, stats, shutdown, None).await
}

/// Run with explicit settings (tests run it in-process). `bound` receives the listening address
/// once the lock is held and the port is bound (tests listen on port 0).
pub async fn run_with(
    cfg: CoreConfig,
    stats: StatsConfig,
    shutdown: CancellationToken,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), ServiceError> {
    pmw_core::metrics::start(SERVICE, stats.stats_metrics_addr, &shutdown).await;
    for outcome in ["ok", "failed"] {
        metrics::counter!(REFRESHES, "outcome" => outcome).increment(0);
    }
    let stores = Stores::open(&cfg, SERVICE).await?;
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &cfg.instance_or(SERVICE));
    let Some(lock) = wait_for_lock(&cfg, &stats, &heartbeat, &shutdown).await? else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(stats.stats_listen)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                ServiceError::transient(format!("cannot bind {}: {e}", stats.stats_listen))
            }
            _ => ServiceError::Config(format!("cannot bind {}: {e}", stats.stats_listen)),
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServiceError::Bug(e.into()))?;
    tracing::info!(%addr, "serving latency dashboard");
    if let Some(tx) = bound {
        let _ = tx.send(addr);
    }

    let shared = http::Shared::new(stats.stats_interval_ms);
    let server_stop = CancellationToken::new();
    let _stop_server = server_stop.clone().drop_guard();
    let mut server = tokio::spawn({
        let stop = server_stop.clone();
        let app = http::router(shared.clone());
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });

    let lost = lock.lost();
    let mut refresh = tokio::time::interval(stats.interval());
    refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut retention = tokio::time::interval(stats.retention_interval());
    retention.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
    beat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut state = LoopState::default();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = lost.cancelled() => return Err(ServiceError::transient("stats lock session lost")),
            r = &mut server => {
                return Err(ServiceError::Bug(anyhow::anyhow!("dashboard server stopped: {r:?}")));
            }
            _ = refresh.tick() => {
                let outcome = tokio::select! {
                    r = snapshot(&stores, UnixMs::now()) => r,
                    _ = shutdown.cancelled() => continue,
                    _ = lost.cancelled() => continue,
                };
                state.refreshed(&shared, outcome);
            }
            _ = retention.tick() => {
                tokio::select! {
                    _ = run_retention(&stores, &stats, &mut state, &shutdown) => {}
                    _ = shutdown.cancelled() => continue,
                    _ = lost.cancelled() => continue,
                };
            }
            _ = beat.tick() => {
                let s = serde_json::json!({
                    "state": "serving",
                    "listen": addr.to_string(),
                    "snapshot_ms": shared.snapshot().map(|s| s.generated_at_ms),
                    "refreshes": state.refreshes,
                    "refresh_failures": state.failures,
                    "partitions_dropped": state.partitions_dropped,
                    "rows_purged": state.rows_purged,
                });
                if let Err(e) = heartbeat.beat(&s).await {
                    tracing::warn!(error = %e, "heartbeat failed");
                }
            }
        }
    }
    server_stop.cancel();
    if tokio::time::timeout(SERVER_STOP_DEADLINE, &mut server)
        .await
        .is_err()
    {
        tracing::warn!("dashboard server did not stop in time");
        server.abort();
    }
    if let Err(e) = lock.release().await {
        tracing::warn!(error = %e, "releasing the stats lock failed (it ends with the session)");
    }
    Ok(())
}

/// The whole snapshot: latency from ClickHouse, the completeness audit from Postgres.
pub async fn snapshot(stores: &Stores, now: UnixMs) -> Result<Snapshot, StatsError> {
    let mut s = query::compute(&stores.ch, now).await?;
    s.audit = audit::report(&stores.pg, now).await?;
    Ok(s)
}

/// Counters of the main loop, for the heartbeat.
#[derive(Default)]
struct LoopState {
    refreshes: u64,
    failures: u64,
    partitions_dropped: u64,
    rows_purged: u64,
}

/// One run of the retention jobs; each job's failure is logged and the others still run.
async fn run_retention(
    stores: &Stores,
    stats: &StatsConfig,
    state: &mut LoopState,
    shutdown: &CancellationToken,
) {
    let now = UnixMs::now();
    let mut dropped = 0;
    for (what, outcome) in [
        (
            "latency",
            retention::drop_expired(&stores.ch, now, stats.stats_retention_days).await,
        ),
        (
            "delivery_log",
            retention::drop_expired_delivery_log(
                &stores.ch,
                now,
                stats.stats_delivery_log_retention_days,
            )
            .await,
        ),
    ] {
        match outcome {
            Ok(d) => dropped += d.len() as u64,
            Err(e) => {
                metrics::counter!(RETENTION_ERRORS, "job" => what).increment(1);
                tracing::warn!(job = what, error = %e, "retention failed")
            }
        }
    }
    state.partitions_dropped += dropped;
    let mut purged = 0;
    match purge::purge_finished(&stores.pg, now, &stats.row_retention(), shutdown).await {
        Ok(p) => purged = p.iter().map(|p| p.rows).sum::<u64>(),
        Err(e) => tracing::warn!(job = "postgres rows", error = %e, "retention failed"),
    }
    state.rows_purged += purged;
    tracing::info!(partitions = dropped, rows = purged, "retention done");
}

impl LoopState {
    fn refreshed(&mut self, shared: &http::Shared, outcome: Result<Snapshot, StatsError>) {
        match outcome {
            Ok(s) => {
                self.refreshes += 1;
                metrics::counter!(REFRESHES, "outcome" => "ok").increment(1);
                metrics::gauge!(SNAPSHOT_AT).set(s.generated_at_ms as f64 / 1000.0);
                tracing::debug!(at = %s.generated_at, "snapshot refreshed");
                shared.publish(s);
            }
            Err(e) => {
                self.failures += 1;
                metrics::counter!(REFRESHES, "outcome" => "failed").increment(1);
                tracing::warn!(error = %e, "snapshot refresh failed");
                shared.failed(e.to_string());
            }
        }
    }
}

/// Wait for the stats writer lock (segmented), beating "waiting for lock" meanwhile. `None` when
/// shutdown comes first.
async fn wait_for_lock(
    cfg: &CoreConfig,
    stats: &StatsConfig,
    heartbeat: &Heartbeat,
    shutdown: &CancellationToken,
) -> Result<Option<WriterLock>, ServiceError> {
    let application_name = format!("{SERVICE}:lock");
    let acquire = WriterLock::acquire(
        cfg,
        &application_name,
        keys::STATS,
        stats.lock_segment(),
        shutdown,
    );
    tokio::pin!(acquire);
    let waiting = serde_json::json!({ "state": "waiting for lock" });
    loop {
        if let Err(e) = heartbeat.beat(&waiting).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        tokio::select! {
            r = &mut acquire => {
                return r.map_err(|e| ServiceError::transient(format!("cannot take the stats lock: {e}")));
            }
            _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
        }
    }
}
