//! pmw core: configuration, telemetry, storage clients, schema migrations, domain types, exit
//! codes and shutdown, shared by every pmw service.

pub mod auth;
pub mod ch;
pub mod config;
pub mod exit;
pub mod heartbeat;
pub mod lock;
pub mod metrics;
pub mod migrate;
pub mod pg;
pub mod service;
pub mod shutdown;
pub mod ssrf;
pub mod storage;
pub mod store;
pub mod telemetry;
pub mod trade;
pub mod types;

pub use config::{ApiConfig, CoreConfig};
pub use exit::ServiceError;
pub use types::{Address, Cursor, UnixMs};
