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
}
