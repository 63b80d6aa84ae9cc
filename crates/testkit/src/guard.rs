//! The start-up contract every service binary must honour, checked against the real stores:
//! unknown schema → 78, unreachable Postgres → 75, known schema → runs, SIGTERM → 0.

use std::path::Path;
use std::time::Duration;

use crate::db::TestDb;
use crate::proc::{run_bin, ChildService};

const WITHIN: Duration = Duration::from_secs(60);

/// Exercise `bin`'s schema guard and exit codes.
pub async fn schema_guard(bin: &Path) {
    // 1. Empty databases: nothing migrated.
    let empty = TestDb::empty().await;
    let (code, _, err) = run_bin(bin, &empty.env(), &[], WITHIN).await;
    assert_eq!(code, 78, "unmigrated schema must exit 78; stderr:\n{err}");
    assert!(
        err.contains("pmwctl migrate"),
        "the error must say what to do:\n{err}"
    );
    drop(empty);

    // 2. Postgres carries a migration this build does not know (a newer deploy migrated it).
    let ahead = TestDb::new().await;
    ahead
        .connect()
        .await
        .batch_execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x', 0)")
        .await
        .unwrap();
    let (code, _, err) = run_bin(bin, &ahead.env(), &[], WITHIN).await;
    assert_eq!(
        code, 78,
        "postgres schema ahead must exit 78; stderr:\n{err}"
    );
    drop(ahead);

    // 3. ClickHouse carries a migration this build does not know.
    let ch_ahead = TestDb::new().await;
    ch_ahead
        .ch
        .query("INSERT INTO schema_migrations (version, name, checksum, applied_ms) VALUES (999, 'future', 'x', 0)")
        .execute()
        .await
        .unwrap();
    let (code, _, err) = run_bin(bin, &ch_ahead.env(), &[], WITHIN).await;
    assert_eq!(
        code, 78,
        "clickhouse schema ahead must exit 78; stderr:\n{err}"
    );
    assert!(err.contains("clickhouse"), "{err}");
    drop(ch_ahead);

    // 4. An applied migration was edited afterwards.
    let edited = TestDb::new().await;
    edited
        .connect()
        .await
        .batch_execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
        .await
        .unwrap();
    let (code, _, err) = run_bin(bin, &edited.env(), &[], WITHIN).await;
    assert_eq!(code, 78, "edited migration must exit 78; stderr:\n{err}");
    drop(edited);

    // 5. Postgres unreachable: transient, restart me.
    let db = TestDb::new().await;
    let mut env = db.env();
    env.retain(|(k, _)| k != "PMW_POSTGRES_URL");
    env.push((
        "PMW_POSTGRES_URL".into(),
        "postgres://pmw@127.0.0.1:1/none".into(),
    ));
    let (code, _, err) = run_bin(bin, &env, &[], WITHIN).await;
    assert_eq!(
        code, 75,
        "unreachable postgres must exit 75; stderr:\n{err}"
    );

    // 6. A broken core setting is a configuration error.
    let mut env = db.env();
    env.push(("PMW_CLICKHOUSE_URL".into(), "not-a-url".into()));
    let (code, _, err) = run_bin(bin, &env, &[], WITHIN).await;
    assert_eq!(code, 78, "invalid config must exit 78; stderr:\n{err}");

    // 7. The known schema: it starts, beats, and stops cleanly on SIGTERM.
    let name = bin.file_name().unwrap().to_string_lossy().to_string();
    let mut child = ChildService::start(bin, &db.env(), &[]);
    let client = db.connect().await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM heartbeats WHERE service = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        assert!(
            child.is_running(),
            "{name} exited instead of running on a known schema"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never wrote its heartbeat"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.terminate();
    assert_eq!(
        child.wait_code(WITHIN).await,
        0,
        "SIGTERM must stop {name} cleanly"
    );
}
