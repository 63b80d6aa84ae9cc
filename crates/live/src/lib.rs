//! pmw-live: follows new block headers, ingests Polymarket fills into ClickHouse, advances the ingest watermark.

use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::storage::Storage;
use pmw_core::{CoreConfig, ServiceError};
use tokio_util::sync::CancellationToken;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-live";

/// Run the service until `shutdown` is cancelled.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let storage = Storage::open(&cfg, SERVICE).await?;
    let heartbeat = Heartbeat::new(storage.pg.clone(), SERVICE, &cfg.instance_or(SERVICE));
    pmw_core::service::beat_until_shutdown(heartbeat, Duration::from_secs(5), shutdown).await;
    Ok(())
}
