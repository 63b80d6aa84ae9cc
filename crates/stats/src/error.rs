//! Errors of the stats jobs (snapshot, retention, charts).

/// A failed stats job; the service logs it and keeps serving its last snapshot.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("unexpected partition {partition:?} (id {id:?}) in {table}")]
    Partition {
        table: String,
        partition: String,
        id: String,
    },
    #[error("chart: {0}")]
    Chart(String),
    #[error("{0}")]
    Postgres(#[from] pmw_core::pg::PgError),
}

impl From<tokio_postgres::Error> for StatsError {
    fn from(e: tokio_postgres::Error) -> StatsError {
        StatsError::Postgres(e.into())
    }
}
