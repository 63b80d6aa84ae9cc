//! `pmwctl migrate` and `pmwctl schema`: apply and inspect the schema of both stores.

use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::{ch, migrate};

pub async fn migrate(cfg: &CoreConfig) -> Result<(), ServiceError> {
    let mut pg = crate::conn::connect(cfg).await?;
    ch::server_client(cfg)
        .query(&format!(
            "CREATE DATABASE IF NOT EXISTS {}",
            cfg.clickhouse_database
        ))
        .execute()
        .await
        .map_err(|e| ServiceError::transient(format!("clickhouse unreachable: {e}")))?;
    let report = migrate::migrate_all(&mut pg, &ch::client(cfg)).await?;
    println!(
        "postgres: applied {:?} (now at {}), clickhouse: applied {:?} (now at {})",
        report.postgres_applied,
        migrate::POSTGRES.len(),
        report.clickhouse_applied,
        migrate::CLICKHOUSE.len()
    );
    Ok(())
}

pub async fn schema(cfg: &CoreConfig) -> Result<(), ServiceError> {
    let pg = crate::conn::connect(cfg).await?;
    migrate::check_schema(&pg, &ch::client(cfg)).await?;
    println!(
        "schema ok: postgres at {}, clickhouse at {}",
        migrate::POSTGRES.len(),
        migrate::CLICKHOUSE.len()
    );
    Ok(())
}
