//! Why a live step failed: [`IngestError`], shared by ingest, finality and the audit (a leaf: it
//! names only the chain's and the stores' errors).

use crate::chain::ChainError;

/// Why a step could not complete. All but `Fenced` and `ReorgTooDeep` are retried.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("postgres: {}", pmw_core::pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error("postgres pool: {0}")]
    Pool(#[from] pmw_core::pg::PgError),
    #[error("the live writer lock is no longer held by this process")]
    Fenced,
    #[error("reorg deeper than {0} blocks: no common ancestor found")]
    ReorgTooDeep(u64),
    #[error("the chain reorganised below the finalized watermark {finalized} (common ancestor {ancestor}): refused")]
    BelowFinalized { ancestor: u64, finalized: u64 },
}

impl From<deadpool_postgres::PoolError> for IngestError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        IngestError::Pool(e.into())
    }
}
