//! pmw-live: follows new block headers, commits Polymarket fills to the Postgres hot ledger in
//! the statement that advances the ingest watermark and wakes push (ClickHouse is filled behind
//! it by the [`projector`]); follows finality and audits finalized blocks for
//! completeness ([`audit`]). One writer, holding the `live` advisory lock.

pub mod audit;
pub mod chain;
pub mod config;
pub mod emitters;
pub mod error;
pub mod failpoint;
pub mod finality;
pub mod heads;
pub mod ingest;
pub mod latency_writer;
mod lead;
pub mod mempool;
pub mod names;
pub mod notifier;
pub mod pending;
pub mod projector;
pub mod providers;
pub mod telemetry;
pub mod version;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::keys;
use pmw_core::stores::Stores;
use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, ServiceError};
use tokio_util::sync::CancellationToken;

pub use config::LiveConfig;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-live";

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let live: LiveConfig = pmw_core::config::load()?;
    let allow = live.exchanges()?;
    run_with(cfg, live, allow, shutdown).await
}

/// Run with explicit settings (tests run it in-process).
pub async fn run_with(
    cfg: CoreConfig,
    live: LiveConfig,
    allow: Allowlist,
    shutdown: CancellationToken,
) -> Result<(), ServiceError> {
    pmw_core::metrics_http::start(SERVICE, live.live_metrics_addr, &shutdown).await;
    telemetry::init();
    let Some(stores) = Stores::open_waiting(&cfg, SERVICE, &shutdown).await? else {
        return Ok(()); // stopped while waiting for the stores
    };
    let instance = cfg.instance_or(SERVICE);
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &instance);
    // A second instance is the standby: it waits here, beating `{"role":"standby"}`, and
    // deposes a frozen holder past its lease (pmw_core::writer).
    let candidate = pmw_core::writer::Candidate {
        application_name: &format!("{SERVICE}:lock"),
        instance: &instance,
        key: keys::LIVE,
        segment: live.lock_segment(),
        lease: pmw_core::writer::LEASE,
    };
    let lock = pmw_core::writer::take(&cfg, &stores.pg, &heartbeat, candidate, &shutdown)
        .await
        .map_err(|e| ServiceError::transient(format!("cannot take the live lock: {e}")))?;
    let Some(lock) = lock else { return Ok(()) };
    // Fired by the renewal when a newer epoch holds the lock; cancelled (ending the renewal)
    // when this function returns.
    let deposed = CancellationToken::new();
    let _stop_renewing = deposed.clone().drop_guard();
    let renewal =
        pmw_core::writer::renew(stores.pg.clone(), keys::LIVE, lock.epoch(), deposed.clone());
    tokio::spawn(renewal);
    listed(&stores, &allow).await;
    let (latency, writer) = latency_writer::LatencyWriter::spawn(stores.ch.clone());
    let (emitters, recorder) = emitters::Recorder::spawn(stores.pg.clone());
    let leader = lead::Leader {
        stores: &stores,
        heartbeat: &heartbeat,
        lock,
        latency,
        emitters,
        shutdown: &shutdown,
    };
    let result = tokio::select! {
        r = lead::lead(cfg, live, allow, leader) => r,
        _ = deposed.cancelled() => {
            Err(ServiceError::transient("live writer deposed (a newer epoch)"))
        }
    };
    // The ingester and the audit (the writers' only senders) are gone: the last latency rows
    // and emitter sightings are written now.
    writer.close().await;
    recorder.close().await;
    result
}

/// The exchanges of `allow` recorded as unlisted emitters are listed now: their warning stops
/// (a failure is logged: the warning stays until the next start).
async fn listed(stores: &Stores, allow: &Allowlist) {
    let addresses: Vec<_> = allow.addresses().collect();
    let done = match stores.pg.get().await {
        Ok(c) => pmw_core::pg::emitters::mark_listed(&**c, &addresses, pmw_core::UnixMs::now().0)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match done {
        Ok(0) => {}
        Ok(n) => tracing::info!(emitters = n, "unlisted emitters now in the exchange list"),
        Err(e) => tracing::warn!(error = %e, "cannot mark listed emitters"),
    }
}
