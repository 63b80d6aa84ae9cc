//! pmw-stats' run loop: wait for the stats writer lock, bind the dashboard's port, then refresh
//! the snapshot, run retention and beat the heartbeat until shutdown or the lock's loss.

use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
use pmw_core::stores::Stores;
use pmw_core::writer;
use pmw_core::{CoreConfig, ServiceError, UnixMs};
use tokio::sync::oneshot;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::{
    audit, days, http, providers, purge, query, retention, sampler, Snapshot, StatsConfig,
    StatsError,
};
use crate::{REFRESHES, RETENTION_ERRORS, SERVICE, SNAPSHOT_AT};

const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
const SERVER_STOP_DEADLINE: Duration = Duration::from_secs(5);

/// Run with explicit settings (tests run it in-process). `bound` receives the listening address
/// once the lock is held and the port is bound (tests listen on port 0).
pub async fn run_with(
    cfg: CoreConfig,
    stats: StatsConfig,
    shutdown: CancellationToken,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), ServiceError> {
    pmw_core::metrics_http::start(SERVICE, stats.stats_metrics_addr, &shutdown).await;
    for outcome in ["ok", "failed"] {
        metrics::counter!(REFRESHES, "outcome" => outcome).increment(0);
    }
    let stores = Stores::open(&cfg, SERVICE).await?;
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &cfg.instance_or(SERVICE));
    let Some(lock) = wait_for_lock(&cfg, &stores, &stats, &heartbeat, &shutdown).await? else {
        return Ok(());
    };
    // Fired by the renewal when a newer epoch holds the lock (this one was deposed).
    let deposed = CancellationToken::new();
    let _stop_renewing = deposed.clone().drop_guard();
    let renewal = writer::renew(
        stores.pg.clone(),
        keys::STATS,
        lock.epoch(),
        deposed.clone(),
    );
    tokio::spawn(renewal);
    let (listener, addr) = pmw_core::listen::bind(stats.stats_listen, bound).await?;
    let shared = http::Shared::new(stats.stats_interval_ms);
    let mut server = Server::spawn(listener, shared.clone());
    let sampling = shutdown.child_token();
    let sampler = stats
        .stats_availability_sampler
        .then(|| sampler::Running::spawn(stores.pg.clone(), stores.ch.clone(), sampling.clone()));
    let serving = Serving {
        stores: &stores,
        stats: &stats,
        heartbeat: &heartbeat,
        shared: &shared,
        addr,
        shutdown: &shutdown,
        deposed: &deposed,
    };
    let served = serve(&serving, &lock, &mut server).await;
    sampling.cancel();
    if let Some(s) = sampler {
        s.join(SERVER_STOP_DEADLINE).await;
    }
    served?;
    server.stop().await;
    if let Err(e) = lock.release().await {
        tracing::warn!(error = %e, "releasing the stats lock failed (it ends with the session)");
    }
    Ok(())
}

/// The dashboard's HTTP server task; it stops gracefully when this is stopped or dropped.
struct Server {
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    stop: CancellationToken,
    _stop_on_drop: tokio_util::sync::DropGuard,
}

impl Server {
    fn spawn(listener: tokio::net::TcpListener, shared: std::sync::Arc<http::Shared>) -> Server {
        let stop = CancellationToken::new();
        let app = http::router(shared);
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            }
        });
        Server {
            task,
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
        }
    }

    /// Stop gracefully, or abort after [`SERVER_STOP_DEADLINE`].
    async fn stop(mut self) {
        self.stop.cancel();
        if tokio::time::timeout(SERVER_STOP_DEADLINE, &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!("dashboard server did not stop in time");
            self.task.abort();
        }
    }
}

/// What the serving loop works with.
struct Serving<'a> {
    stores: &'a Stores,
    stats: &'a StatsConfig,
    heartbeat: &'a Heartbeat,
    shared: &'a std::sync::Arc<http::Shared>,
    addr: SocketAddr,
    shutdown: &'a CancellationToken,
    /// Fired when a newer epoch holds the lock.
    deposed: &'a CancellationToken,
}

/// Refresh the snapshot, run retention and beat the heartbeat on their intervals, until
/// shutdown (`Ok`), the lock's loss or the server's end (`Err`).
async fn serve(
    s: &Serving<'_>,
    lock: &WriterLock,
    server: &mut Server,
) -> Result<(), ServiceError> {
    let shutdown = s.shutdown;
    let lost = lock.lost();
    let deposed = s.deposed;
    let mut refresh = every(s.stats.interval());
    let mut retention = every(s.stats.retention_interval());
    let mut beat = every(HEARTBEAT_EVERY);
    let mut state = LoopState::default();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            _ = lost.cancelled() => return Err(ServiceError::transient("stats lock session lost")),
            _ = deposed.cancelled() => return Err(ServiceError::transient("stats writer deposed (a newer epoch)")),
            r = &mut server.task => {
                return Err(ServiceError::Bug(anyhow::anyhow!("dashboard server stopped: {r:?}")));
            }
            _ = refresh.tick() => {
                let outcome = tokio::select! {
                    r = snapshot(s.stores, UnixMs::now(), days::days_shown(s.stats.stats_retention_days)) => r,
                    _ = shutdown.cancelled() => continue,
                    _ = lost.cancelled() => continue,
                };
                state.refreshed(s.shared, outcome);
            }
            _ = retention.tick() => {
                tokio::select! {
                    _ = run_retention(s, lock.epoch(), &mut state) => {}
                    _ = shutdown.cancelled() => continue,
                    _ = lost.cancelled() => continue,
                };
            }
            _ = beat.tick() => state.beat(s).await,
        }
    }
}

/// An interval that delays its ticks after a slow one (never bursts to catch up).
fn every(period: Duration) -> tokio::time::Interval {
    let mut i = tokio::time::interval(period);
    i.set_missed_tick_behavior(MissedTickBehavior::Delay);
    i
}

/// Counters of the main loop, for the heartbeat.
#[derive(Default)]
struct LoopState {
    refreshes: u64,
    failures: u64,
    partitions_dropped: u64,
    rows_purged: u64,
}

/// One run of the retention jobs; each job's failure is logged and the others still run. The
/// Postgres deletes carry the writer `epoch` (a deposed instance deletes nothing).
async fn run_retention(s: &Serving<'_>, epoch: i64, state: &mut LoopState) {
    let (stores, stats, shutdown) = (s.stores, s.stats, s.shutdown);
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
    match purge::purge_finished(&stores.pg, now, &stats.row_retention(), epoch, shutdown).await {
        Ok(p) => purged = p.iter().map(|p| p.rows).sum::<u64>(),
        Err(e) => tracing::warn!(job = "postgres rows", error = %e, "retention failed"),
    }
    state.rows_purged += purged;
    tracing::info!(partitions = dropped, rows = purged, "retention done");
}

impl LoopState {
    /// Beat the heartbeat with the serving state.
    async fn beat(&self, s: &Serving<'_>) {
        let state = serde_json::json!({
            "role": "leader",
            "state": "serving",
            "listen": s.addr.to_string(),
            "snapshot_ms": s.shared.snapshot().map(|s| s.generated_at_ms),
            "refreshes": self.refreshes,
            "refresh_failures": self.failures,
            "partitions_dropped": self.partitions_dropped,
            "rows_purged": self.rows_purged,
        });
        if let Err(e) = s.heartbeat.beat(&state).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
    }

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

/// Wait for the stats writer lock as the standby (segmented, beating `{"role":"standby"}`, and
/// deposing a frozen holder past its lease: pmw_core::writer), then take its next epoch. `None`
/// when shutdown comes first.
async fn wait_for_lock(
    cfg: &CoreConfig,
    stores: &Stores,
    stats: &StatsConfig,
    heartbeat: &Heartbeat,
    shutdown: &CancellationToken,
) -> Result<Option<WriterLock>, ServiceError> {
    let candidate = writer::Candidate {
        application_name: &format!("{SERVICE}:lock"),
        instance: &cfg.instance_or(SERVICE),
        key: keys::STATS,
        segment: stats.lock_segment(),
        lease: writer::LEASE,
    };
    writer::take(cfg, &stores.pg, heartbeat, candidate, shutdown)
        .await
        .map_err(|e| ServiceError::transient(format!("cannot take the stats lock: {e}")))
}

/// The whole snapshot (with `days` daily availability bars): latency from ClickHouse, the
/// completeness audit and the RPC providers from Postgres, the pending tier from both.
pub async fn snapshot(stores: &Stores, now: UnixMs, days: i64) -> Result<Snapshot, StatsError> {
    let mut s = query::compute_with(&stores.ch, now, days).await?;
    s.audit = audit::report(&stores.pg, now).await?;
    s.pending = crate::pending::report(&stores.ch, &stores.pg, now).await?;
    s.diagnostics.rpc_providers = providers::current(&stores.pg).await?;
    Ok(s)
}
