//! pmw-edge (edge mode, docs/ARCHITECTURE.md §3.6): a stateless server of `/v1/ws`. It follows the
//! push leader's rounds on the NATS JetStream stream ([`feed`]) into a session hub, and serves
//! sessions with the session layer push itself uses (`pmw_session`: auth, caps, revocation, resume
//! from the ledger stores, heartbeats, slow consumers). Run as many as needed behind Caddy: a push
//! failover or deploy closes none of their sockets.

pub mod config;
mod feed;
mod index;
mod service;
mod watchdog;

use pmw_core::{CoreConfig, ServiceError};
use tokio_util::sync::CancellationToken;

pub use config::EdgeConfig;
pub use feed::FeedStats;
pub use service::run_with;

/// Service name used in logs and `application_name`.
pub const SERVICE: &str = "pmw-edge";

/// What stops an edge.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    #[error("bus: {0}")]
    Bus(String),
    /// The broker did not answer (connect, stream API): worth asking again.
    #[error("bus: {0}")]
    BusUnavailable(String),
    #[error("postgres: {0}")]
    Store(String),
}

impl From<EdgeError> for ServiceError {
    fn from(e: EdgeError) -> Self {
        ServiceError::transient(e.to_string())
    }
}

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let edge = EdgeConfig::load()?;
    run_with(cfg, edge, shutdown, None).await
}
