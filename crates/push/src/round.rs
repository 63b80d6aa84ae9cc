//! What a lane's round returns: what it did ([`RoundOutcome`]), or why it failed ([`RoundError`]:
//! fenced off by a newer epoch, or a store that did not answer).

use pmw_core::pg::PgError;

#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("this leader's epoch was superseded: write fenced off")]
    Fenced,
    #[error("{0}")]
    Postgres(#[from] PgError),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("webhooks: {0}")]
    Webhook(String),
    /// Edge mode: the broker did not store the round (the cursor waits; the round is retried).
    #[error("bus: {0}")]
    Bus(String),
}

impl From<tokio_postgres::Error> for RoundError {
    fn from(e: tokio_postgres::Error) -> Self {
        RoundError::Postgres(PgError::Query(e))
    }
}

impl From<deadpool_postgres::PoolError> for RoundError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        RoundError::Postgres(PgError::Pool(e))
    }
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundOutcome {
    pub trades: usize,
    pub retracted: usize,
    pub frames: usize,
    pub webhooks: u64,
    /// Of `webhooks`, those handed to the dispatcher claimed (no scan needed for them).
    pub handed: u64,
    /// Deliveries not enqueued because their endpoint was deleted or disabled meanwhile.
    pub webhooks_skipped: u64,
    /// The round read a full batch: more is waiting.
    pub more: bool,
}

/// The hand-over error of a loop (`push` rounds or `webhook` rounds) that completed no round
/// within the stall limit.
pub fn stalled(lane: &str, stall: std::time::Duration, why: &str) -> pmw_core::ServiceError {
    tracing::error!(
        lane,
        stall_ms = stall.as_millis() as u64,
        last = why,
        "no round completed within the stall limit; handing over"
    );
    pmw_core::ServiceError::transient(format!(
        "no {lane} round completed for {} ms ({why}); handing over to the standby",
        stall.as_millis()
    ))
}
