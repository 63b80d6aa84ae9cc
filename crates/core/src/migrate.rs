//! Schema migrations for Postgres and ClickHouse: SQL files embedded at build time, applied in
//! order and recorded with a checksum in each store's `schema_migrations`, and the start-up check
//! every service runs (a schema this build does not know is a configuration error, exit 78).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use crate::ch::ChClient;
use crate::types::UnixMs;

/// One embedded migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

impl Migration {
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

macro_rules! migration {
    ($version:literal, $name:literal, $path:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../migrations/",
                $path
            )),
        }
    };
}

/// Postgres migrations, in order. Every file in `migrations/postgres` must be listed (tested).
pub const POSTGRES: &[Migration] = &[
    migration!(1, "init", "postgres/0001_init.sql"),
    migration!(2, "subs_version", "postgres/0002_subs_version.sql"),
    migration!(3, "sessions", "postgres/0003_sessions.sql"),
    migration!(
        4,
        "webhook_health_retention",
        "postgres/0004_webhook_health_retention.sql"
    ),
    migration!(
        5,
        "chain_block_trades",
        "postgres/0005_chain_block_trades.sql"
    ),
    migration!(6, "webhook_cursor", "postgres/0006_webhook_cursor.sql"),
    migration!(7, "webhook_pending", "postgres/0007_webhook_pending.sql"),
    migration!(8, "idempotency", "postgres/0008_idempotency.sql"),
    migration!(9, "filters", "postgres/0009_filters.sql"),
    migration!(10, "finality", "postgres/0010_finality.sql"),
    migration!(11, "audit", "postgres/0011_audit.sql"),
    migration!(12, "webhook_churn", "postgres/0012_webhook_churn.sql"),
    migration!(
        13,
        "webhook_payload_text",
        "postgres/0013_webhook_payload_text.sql"
    ),
    migration!(
        14,
        "subs_version_changes",
        "postgres/0014_subs_version_changes.sql"
    ),
    migration!(15, "replay_quota", "postgres/0015_replay_quota.sql"),
    migration!(16, "hot_ledger", "postgres/0016_hot_ledger.sql"),
    migration!(17, "ledger_visible", "postgres/0017_ledger_visible.sql"),
    migration!(18, "fleet_limits", "postgres/0018_fleet_limits.sql"),
    migration!(
        19,
        "market_subscriptions",
        "postgres/0019_market_subscriptions.sql"
    ),
    migration!(
        20,
        "chat_destinations",
        "postgres/0020_chat_destinations.sql"
    ),
    migration!(
        21,
        "unlisted_emitters",
        "postgres/0021_unlisted_emitters.sql"
    ),
    migration!(22, "writer_epochs", "postgres/0022_writer_epochs.sql"),
    migration!(23, "pending", "postgres/0023_pending.sql"),
    migration!(24, "pending_webhooks", "postgres/0024_pending_webhooks.sql"),
    migration!(25, "pending_ends", "postgres/0025_pending_ends.sql"),
    migration!(26, "pending_unwound", "postgres/0026_pending_unwound.sql"),
    migration!(
        27,
        "deliveries_gone_with_endpoint",
        "postgres/0027_deliveries_gone_with_endpoint.sql"
    ),
    migration!(
        28,
        "delivered_without_body",
        "postgres/0028_delivered_without_body.sql"
    ),
];

/// ClickHouse migrations, in order. Every file in `migrations/clickhouse` must be listed (tested).
pub const CLICKHOUSE: &[Migration] = &[
    migration!(1, "init", "clickhouse/0001_init.sql"),
    migration!(2, "audit", "clickhouse/0002_audit.sql"),
    migration!(3, "availability", "clickhouse/0003_availability.sql"),
    migration!(
        4,
        "availability_causes",
        "clickhouse/0004_availability_causes.sql"
    ),
    migration!(5, "pending_latency", "clickhouse/0005_pending_latency.sql"),
];

/// Advisory lock key serialising concurrent `pmwctl migrate` runs (per database).
const MIGRATE_LOCK: i64 = 7_000;

/// Which store a schema problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Postgres,
    ClickHouse,
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Store::Postgres => "postgres",
            Store::ClickHouse => "clickhouse",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "{store} schema is at versions {applied:?} but this build knows {known:?}; run `pmwctl migrate` with the matching build"
    )]
    Mismatch {
        store: Store,
        applied: Vec<u32>,
        known: Vec<u32>,
    },
    #[error("{store} migration {version} was changed after it was applied (checksum differs)")]
    Modified { store: Store, version: u32 },
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// What a migrate run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    pub postgres_applied: Vec<u32>,
    pub clickhouse_applied: Vec<u32>,
}

const PG_VERSION_TABLE: &str = include_str!("sql/pg_schema_migrations.sql");

const CH_VERSION_TABLE: &str = crate::ch::statements::SCHEMA_MIGRATIONS_TABLE;

/// Apply pending Postgres migrations, each in its own transaction, under an advisory lock.
pub async fn migrate_postgres(client: &mut Client) -> Result<Vec<u32>, SchemaError> {
    client.batch_execute(PG_VERSION_TABLE).await?;
    let mut applied_now = Vec::new();
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
        .await?;
    let applied = pg_applied(&tx).await?;
    check_checksums(Store::Postgres, POSTGRES, &applied)?;
    for m in POSTGRES
        .iter()
        .filter(|m| !applied.contains_key(&m.version))
    {
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_ms) VALUES ($1, $2, $3, $4)",
            &[&(m.version as i32), &m.name, &m.checksum(), &UnixMs::now().0],
        )
        .await?;
        tracing::info!(
            store = "postgres",
            version = m.version,
            name = m.name,
            "migration applied"
        );
        applied_now.push(m.version);
    }
    tx.commit().await?;
    Ok(applied_now)
}

async fn pg_applied(
    client: &impl tokio_postgres::GenericClient,
) -> Result<BTreeMap<u32, String>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT version, checksum FROM schema_migrations ORDER BY version",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, String>(1)))
        .collect())
}

/// Split a ClickHouse migration into statements: `--` comment lines dropped, split on `;`.
pub fn clickhouse_statements(sql: &str) -> Vec<String> {
    let without_comments: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    without_comments
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[derive(Debug, Deserialize, clickhouse::Row)]
struct ChApplied {
    version: u32,
    checksum: String,
}

#[derive(Debug, serde::Serialize, clickhouse::Row)]
struct ChAppliedRow<'a> {
    version: u32,
    name: &'a str,
    checksum: String,
    applied_ms: i64,
}

async fn ch_applied(ch: &ChClient) -> Result<BTreeMap<u32, String>, clickhouse::error::Error> {
    let rows = ch
        .query(crate::ch::statements::MIGRATIONS_APPLIED)
        .fetch_all::<ChApplied>()
        .await?;
    Ok(rows.into_iter().map(|r| (r.version, r.checksum)).collect())
}

/// Apply pending ClickHouse migrations. Statements are idempotent (`IF NOT EXISTS`), so a run
/// interrupted half-way is completed by the next one. The caller serialises concurrent runs.
pub async fn migrate_clickhouse(ch: &ChClient) -> Result<Vec<u32>, SchemaError> {
    ch.query(CH_VERSION_TABLE).execute().await?;
    let applied = ch_applied(ch).await?;
    check_checksums(Store::ClickHouse, CLICKHOUSE, &applied)?;
    let mut applied_now = Vec::new();
    for m in CLICKHOUSE
        .iter()
        .filter(|m| !applied.contains_key(&m.version))
    {
        for stmt in clickhouse_statements(m.sql) {
            match ch.query(&stmt).execute().await {
                Ok(()) => {}
                // ClickHouse 18.16 has no `ADD COLUMN IF NOT EXISTS`: a column an interrupted
                // run already added is done.
                Err(e) if is_add_column(&stmt) && column_exists(&e) => {
                    tracing::info!(store = "clickhouse", version = m.version, statement = %stmt, "column already there");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut insert = ch.insert::<ChAppliedRow<'_>>("schema_migrations").await?;
        insert
            .write(&ChAppliedRow {
                version: m.version,
                name: m.name,
                checksum: m.checksum(),
                applied_ms: UnixMs::now().0,
            })
            .await?;
        insert.end().await?;
        tracing::info!(
            store = "clickhouse",
            version = m.version,
            name = m.name,
            "migration applied"
        );
        applied_now.push(m.version);
    }
    Ok(applied_now)
}

/// An `ALTER TABLE … ADD COLUMN …` statement.
fn is_add_column(stmt: &str) -> bool {
    let s = stmt.to_ascii_uppercase();
    s.starts_with("ALTER TABLE") && s.contains(" ADD COLUMN ")
}

/// ClickHouse's answer to adding a column that exists (code 44 on 18.16, 15 later).
fn column_exists(e: &clickhouse::error::Error) -> bool {
    e.to_string().contains("already exists")
}

/// Migrate both stores. The Postgres advisory lock is held on `pg` for the ClickHouse part too,
/// so two concurrent runs do not interleave.
pub async fn migrate_all(pg: &mut Client, ch: &ChClient) -> Result<MigrateReport, SchemaError> {
    pg.execute("SELECT pg_advisory_lock($1)", &[&MIGRATE_LOCK])
        .await?;
    let result = async {
        let postgres_applied = migrate_postgres(pg).await?;
        let clickhouse_applied = migrate_clickhouse(ch).await?;
        Ok(MigrateReport {
            postgres_applied,
            clickhouse_applied,
        })
    }
    .await;
    pg.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK])
        .await?;
    result
}

fn check_checksums(
    store: Store,
    known: &[Migration],
    applied: &BTreeMap<u32, String>,
) -> Result<(), SchemaError> {
    for m in known {
        if let Some(sum) = applied.get(&m.version) {
            if *sum != m.checksum() {
                return Err(SchemaError::Modified {
                    store,
                    version: m.version,
                });
            }
        }
    }
    Ok(())
}

fn check_exact(
    store: Store,
    known: &[Migration],
    applied: &BTreeMap<u32, String>,
) -> Result<(), SchemaError> {
    let known_versions: Vec<u32> = known.iter().map(|m| m.version).collect();
    let applied_versions: Vec<u32> = applied.keys().copied().collect();
    if known_versions != applied_versions {
        return Err(SchemaError::Mismatch {
            store,
            applied: applied_versions,
            known: known_versions,
        });
    }
    check_checksums(store, known, applied)
}

/// The start-up check: both stores carry exactly the migrations this build knows.
pub async fn check_schema(
    pg: &impl tokio_postgres::GenericClient,
    ch: &ChClient,
) -> Result<(), SchemaError> {
    check_pg_schema(pg).await?;
    check_ch_schema(ch).await
}

/// Postgres carries exactly the migrations this build knows.
pub async fn check_pg_schema(pg: &impl tokio_postgres::GenericClient) -> Result<(), SchemaError> {
    let has_table: bool = pg
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?
        .get(0);
    let pg_applied = if has_table {
        pg_applied(pg).await?
    } else {
        BTreeMap::new()
    };
    check_exact(Store::Postgres, POSTGRES, &pg_applied)
}

/// ClickHouse carries exactly the migrations this build knows.
pub async fn check_ch_schema(ch: &ChClient) -> Result<(), SchemaError> {
    let ch_has_table: u8 = ch
        .query(crate::ch::statements::HAS_MIGRATIONS_TABLE)
        .fetch_one()
        .await?;
    let ch_applied = if ch_has_table == 1 {
        ch_applied(ch).await?
    } else {
        BTreeMap::new()
    };
    check_exact(Store::ClickHouse, CLICKHOUSE, &ch_applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed_files(dir: &str, list: &[Migration]) {
        let path = format!("{}/../../migrations/{dir}", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<String> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        assert_eq!(
            files.len(),
            list.len(),
            "{dir}: every .sql file must be listed in migrate.rs"
        );
        for (i, (file, m)) in files.iter().zip(list).enumerate() {
            assert_eq!(
                m.version as usize,
                i + 1,
                "{dir}: versions must be 1..n in order"
            );
            assert_eq!(*file, format!("{:04}_{}.sql", m.version, m.name), "{dir}");
        }
    }

    #[test]
    fn every_migration_file_is_listed_in_order() {
        listed_files("postgres", POSTGRES);
        listed_files("clickhouse", CLICKHOUSE);
    }

    #[test]
    fn clickhouse_statements_split_and_drop_comments() {
        let stmts = clickhouse_statements("-- a; comment;\nCREATE TABLE a (x UInt8) ENGINE = Log;\n\n-- b\nCREATE TABLE b (y UInt8) ENGINE = Log;\n");
        assert_eq!(
            stmts,
            vec![
                "CREATE TABLE a (x UInt8) ENGINE = Log",
                "CREATE TABLE b (y UInt8) ENGINE = Log"
            ]
        );
    }

    #[test]
    fn clickhouse_migrations_have_no_placeholders_or_datetime64() {
        for m in CLICKHOUSE {
            for s in clickhouse_statements(m.sql) {
                assert!(
                    !s.contains('?'),
                    "migration {}: '?' is a bind placeholder: {s}",
                    m.version
                );
                assert!(
                    !s.contains("DateTime"),
                    "migration {}: times are Int64 ms: {s}",
                    m.version
                );
            }
        }
    }
}
