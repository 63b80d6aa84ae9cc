//! `pmwctl migrate` on empty databases, twice: the schema is complete and the second run applies nothing.

use std::path::Path;
use std::time::Duration;

use pmw_testkit::{run_bin, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_pmwctl");

#[tokio::test]
async fn migrate_applies_to_empty_databases_and_is_idempotent() {
    let db = TestDb::empty().await;
    // The ClickHouse database must be created by migrate itself.
    db.ch
        .query(&format!("DROP DATABASE {}", db.name))
        .execute()
        .await
        .unwrap();

    let (code, out, err) = run_bin(
        Path::new(BIN),
        &db.env(),
        &["schema"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        code, 78,
        "schema on empty databases must report a mismatch: {out}{err}"
    );

    let (code, out, err) = run_bin(
        Path::new(BIN),
        &db.env(),
        &["migrate"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&applied_all()), "{out}");

    let (code, out, err) = run_bin(
        Path::new(BIN),
        &db.env(),
        &["migrate"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("postgres: applied []") && out.contains("clickhouse: applied []"),
        "{out}"
    );

    let (code, out, err) = run_bin(
        Path::new(BIN),
        &db.env(),
        &["schema"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");

    // Every table of the design exists, in each store, exactly once.
    let pg = db.connect().await;
    let pg_tables: Vec<String> = pmw_testkit::column(
        &pg,
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
    )
    .await;
    for t in [
        "accounts",
        "api_keys",
        "chain_blocks",
        "heartbeats",
        "ingest_cursor",
        "market_names",
        "plans",
        "push_cursor",
        "push_epoch",
        "reorgs",
        "schema_migrations",
        "subs_version",
        "subscriptions",
        "webhook_cursor",
        "webhook_deliveries",
        "webhook_endpoints",
        "webhook_failing",
        "ws_claims",
        "ws_tickets",
    ] {
        assert!(
            pg_tables.contains(&t.to_string()),
            "postgres table {t} missing: {pg_tables:?}"
        );
    }
    let versions: i64 = pg
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        versions,
        pmw_core::migrate::POSTGRES.len() as i64,
        "a second migrate must not record versions twice"
    );

    let ch_tables: Vec<String> = db
        .ch
        .query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        ch_tables,
        [
            "availability_samples",
            "delivery_log",
            "ingest_latency",
            "push_latency",
            "schema_migrations",
            "trades",
            "trades_by_wallet"
        ],
    );
    let ch_versions: u64 = db
        .ch
        .query("SELECT count() FROM schema_migrations")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(ch_versions, pmw_core::migrate::CLICKHOUSE.len() as u64);
}

#[tokio::test]
async fn hot_tables_have_low_fillfactor_and_own_autovacuum() {
    let db = TestDb::new().await;
    let pg = db.connect().await;
    for t in [
        "ingest_cursor",
        "push_cursor",
        "push_epoch",
        "webhook_cursor",
        "heartbeats",
        "subs_version",
    ] {
        let opts: Vec<String> = pg
            .query_one(
                "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = $1",
                &[&t],
            )
            .await
            .unwrap()
            .get(0);
        let ff = opts
            .iter()
            .find_map(|o| o.strip_prefix("fillfactor="))
            .unwrap_or_else(|| panic!("{t} has no fillfactor: {opts:?}"));
        assert!(ff.parse::<u32>().unwrap() <= 50, "{t}: {opts:?}");
        assert!(
            opts.iter()
                .any(|o| o.starts_with("autovacuum_vacuum_threshold=")),
            "{t} has no autovacuum setting: {opts:?}"
        );
        // No index beyond the primary key: updates of the hot columns stay HOT.
        let idx: i64 = pg
            .query_one("SELECT count(*) FROM pg_index WHERE indrelid = $1::text::regclass AND NOT indisprimary", &[&t])
            .await
            .unwrap()
            .get(0);
        assert_eq!(idx, 0, "{t} must not index its updated columns");
    }
}

/// What a first run prints: every listed migration of both stores applied.
fn applied_all() -> String {
    let versions = |ms: &[pmw_core::migrate::Migration]| -> Vec<u32> {
        ms.iter().map(|m| m.version).collect()
    };
    let (pg, ch) = (
        versions(pmw_core::migrate::POSTGRES),
        versions(pmw_core::migrate::CLICKHOUSE),
    );
    format!(
        "postgres: applied {pg:?} (now at {}), clickhouse: applied {ch:?} (now at {})",
        pg.last().unwrap(),
        ch.last().unwrap()
    )
}

#[tokio::test]
async fn concurrent_migrate_runs_do_not_conflict() {
    let db = TestDb::empty().await;
    let env = db.env();
    let runs = (0..3).map(|_| {
        let env = env.clone();
        tokio::spawn(async move {
            run_bin(Path::new(BIN), &env, &["migrate"], Duration::from_secs(60)).await
        })
    });
    let all: Vec<u32> = pmw_core::migrate::POSTGRES
        .iter()
        .map(|m| m.version)
        .collect();
    let every = format!("postgres: applied {all:?}");
    let mut applied = 0;
    for r in futures_join(runs).await {
        let (code, out, err) = r;
        assert_eq!(code, 0, "{out}{err}");
        if out.contains(&every) {
            applied += 1;
        }
    }
    assert_eq!(
        applied, 1,
        "exactly one concurrent run applies the migration"
    );
}

async fn futures_join<T>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
