//! pmw core: configuration, telemetry, storage clients, schema migrations, domain types, exit
//! codes and shutdown, shared by every pmw service.

pub mod auth;
pub mod backoff;
pub mod build_info;
pub mod ch;
pub mod channels;
pub mod chat;
pub mod client;
pub mod config;
pub mod exit;
pub mod filter;
pub mod heartbeat;
pub mod listen;
pub mod lock;
pub mod message;
pub mod metrics;
pub mod metrics_http;
pub mod migrate;
pub mod pg;
pub mod plans;
pub mod redact;
pub mod sealed;
pub mod service;
pub mod shutdown;
pub mod ssrf;
pub mod stores;
pub mod telemetry;
pub mod trade;
pub mod types;
pub mod webhook;
pub mod writer;

pub use config::CoreConfig;
pub use exit::ServiceError;
pub use types::{Address, Cursor, Position, UnixMs};
