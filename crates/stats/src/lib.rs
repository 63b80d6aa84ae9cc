//! pmw-stats: latency aggregates for 1h/24h/7d/30d, push and ingest availability from its
//! once-a-second sampler ([`sampler`], [`availability`]) and the completeness audit's figures
//! ([`audit`]), the pending tier's figures ([`pending`]), the public dashboard page (`GET /latency`) and its JSON (`GET /latency.json`), and the retention jobs: latency and `delivery_log` day
//! partitions in ClickHouse ([`retention`]), finished `ws_claims` and `webhook_deliveries` rows
//! in Postgres ([`purge`]). One writer, holding the `stats` advisory lock; it binds its loopback
//! port only once it holds the lock.

pub mod audit;
pub mod availability;
pub mod charts;
pub mod config;
pub mod days;
pub mod error;
pub mod figures;
pub mod html;
pub mod http;
pub mod incidents;
pub mod model;
pub mod page;
pub mod pending;
pub mod providers;
pub mod purge;
pub mod query;
pub mod retention;
pub mod sampler;
mod service;
pub mod snapshot;

use pmw_core::{CoreConfig, ServiceError};
use tokio_util::sync::CancellationToken;

pub use config::StatsConfig;
pub use error::StatsError;
pub use service::{run_with, snapshot};
pub use snapshot::Snapshot;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-stats";

/// `pmw_stats_refreshes_total{outcome}`: snapshot recomputations, `ok` or `failed`.
pub const REFRESHES: &str = "pmw_stats_refreshes_total";
/// `pmw_stats_snapshot_timestamp_seconds`: when the published snapshot was computed.
pub const SNAPSHOT_AT: &str = "pmw_stats_snapshot_timestamp_seconds";
/// `pmw_stats_retention_errors_total{job}`: retention jobs that failed.
pub const RETENTION_ERRORS: &str = "pmw_stats_retention_errors_total";

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let stats = StatsConfig::load()?;
    run_with(cfg, stats, shutdown, None).await
}
