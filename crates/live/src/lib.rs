//! pmw-live: follows new block headers, commits Polymarket fills to the Postgres hot ledger in
//! the statement that advances the ingest watermark and wakes push (ClickHouse is filled behind
//! it by the [`projector`]); follows finality and audits finalized blocks for
//! completeness ([`audit`]). One writer, holding the `live` advisory lock.

pub mod audit;
pub mod chain;
pub mod config;
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
pub mod projector;
pub mod providers;
pub mod telemetry;
pub mod version;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
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
    run_with(cfg, live, Allowlist::polymarket(), shutdown).await
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
    let leader = lead::Leader {
        stores: &stores,
        heartbeat: &heartbeat,
        lock,
        latency,
        shutdown: &shutdown,
    };
    let result = lead::lead(cfg, live, allow, leader).await;
    // The ingester (the writer's only sender) is gone: the last latency rows are written now.
    writer.close().await;
    result
}
