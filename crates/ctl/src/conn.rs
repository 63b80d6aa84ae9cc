//! One unpooled Postgres connection for an operator command (unreachable → exit 75).

use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;

/// Connect with `application_name = pmwctl`; the connection task lives until the client drops.
pub async fn connect(cfg: &CoreConfig) -> Result<tokio_postgres::Client, ServiceError> {
    let mut pg = cfg.postgres();
    pg.application_name("pmwctl")
        .connect_timeout(std::time::Duration::from_secs(5));
    // Host by host, and only to the member Patroni names primary when its REST APIs are set.
    let (client, conn) = pmw_core::pg::follow::connect(&pg, &cfg.patroni())
        .await
        .map_err(|e| ServiceError::transient(format!("postgres unreachable: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!(error = %e, "postgres connection ended");
        }
    });
    Ok(client)
}

/// A failed query: the database went away (75) or something else (1).
pub fn db_error(e: tokio_postgres::Error) -> ServiceError {
    if e.is_closed() || e.as_db_error().is_none() {
        ServiceError::transient(format!("postgres: {e}"))
    } else {
        ServiceError::Bug(anyhow::anyhow!("postgres: {e}"))
    }
}

/// Milliseconds as a short human age: `850 ms`, `12.3 s`, `4 min`, `2.5 h`.
pub fn age(ms: i64) -> String {
    match ms {
        m if m < 0 => format!("in {}", age(-m)),
        m if m < 1_000 => format!("{m} ms"),
        m if m < 60_000 => format!("{:.1} s", m as f64 / 1e3),
        m if m < 3_600_000 => format!("{} min", m / 60_000),
        m => format!("{:.1} h", m as f64 / 3.6e6),
    }
}

/// Bytes as a short human size.
pub fn size(bytes: i64) -> String {
    match bytes {
        b if b < 10 * 1024 => format!("{b} B"),
        b if b < 10 * 1024 * 1024 => format!("{} KiB", b / 1024),
        b => format!("{} MiB", b / (1024 * 1024)),
    }
}
