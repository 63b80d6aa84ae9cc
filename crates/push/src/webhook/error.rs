//! Why the delivery engine stopped or one of its writes failed.

/// Why the delivery engine stopped or a write failed. Cloneable so [`Dispatcher::wait`] can
/// report the final result more than once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The push epoch moved on: this dispatcher's writes no longer land and it has stopped.
    #[error("fenced: push epoch {epoch} of slot {slot} is no longer current")]
    Fenced { slot: i16, epoch: i64 },
    #[error("webhook postgres: {0}")]
    Db(String),
    #[error("{0}")]
    Client(String),
    #[error("webhook task failed: {0}")]
    Task(String),
}

impl From<tokio_postgres::Error> for WebhookError {
    fn from(e: tokio_postgres::Error) -> WebhookError {
        WebhookError::Db(pmw_core::pg::describe(&e))
    }
}

impl From<deadpool_postgres::PoolError> for WebhookError {
    fn from(e: deadpool_postgres::PoolError) -> WebhookError {
        WebhookError::Db(e.to_string())
    }
}
