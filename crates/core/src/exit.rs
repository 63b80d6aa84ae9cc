//! Process exit codes and the error kinds that map to them (sysexits-style).
//!
//! - 0: clean stop.
//! - 75 (`EX_TEMPFAIL`): transient infrastructure loss (a lost database session): restart me.
//! - 78 (`EX_CONFIG`): configuration or schema error: do not restart until a human fixes it.
//! - anything else (1): a bug.

use crate::config::ConfigError;
use crate::migrate::SchemaError;

pub const CLEAN: u8 = 0;
pub const BUG: u8 = 1;
pub const TEMPFAIL: u8 = 75;
pub const CONFIG: u8 = 78;

/// Why a service stopped, classified for its supervisor.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Configuration or schema problem: do not restart.
    #[error("configuration error: {0}")]
    Config(String),
    /// Lost infrastructure (database session, lock): restart.
    #[error("transient failure: {0}")]
    Transient(String),
    /// Anything else.
    #[error(transparent)]
    Bug(#[from] anyhow::Error),
}

impl ServiceError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ServiceError::Config(_) => CONFIG,
            ServiceError::Transient(_) => TEMPFAIL,
            ServiceError::Bug(_) => BUG,
        }
    }

    pub fn transient(msg: impl std::fmt::Display) -> ServiceError {
        ServiceError::Transient(msg.to_string())
    }
}

impl From<ConfigError> for ServiceError {
    fn from(e: ConfigError) -> Self {
        ServiceError::Config(e.to_string())
    }
}

impl From<SchemaError> for ServiceError {
    fn from(e: SchemaError) -> Self {
        match e {
            SchemaError::Mismatch { .. } | SchemaError::Modified { .. } => {
                ServiceError::Config(e.to_string())
            }
            SchemaError::Postgres(_) | SchemaError::ClickHouse(_) => {
                ServiceError::Transient(e.to_string())
            }
        }
    }
}
