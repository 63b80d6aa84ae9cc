//! The start-up contract every service binary must honour, checked against the real stores:
//! unknown schema → 78, unreachable Postgres → 75 (api, stats) or a wait that SIGTERM ends
//! with 0 (live, push: the delivery path waits for its stores), known schema → runs,
//! SIGTERM → 0.

use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

use crate::db::TestDb;
use crate::proc::{run_bin, ChildService};
use crate::wait::eventually;

const WITHIN: Duration = Duration::from_secs(60);

/// What a service does when Postgres is unreachable at start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unreachable {
    /// Exit 75 (the supervisor restarts it).
    Exits75,
    /// Wait in-process for the store (until SIGTERM, which stops it with 0).
    Waits,
}

/// Exercise `bin`'s schema guard and exit codes (a service that exits 75 on an unreachable
/// Postgres).
pub async fn schema_guard(bin: &Path) {
    schema_guard_with(bin, Unreachable::Exits75).await;
}

/// Exercise `bin`'s schema guard and exit codes, with its behaviour on an unreachable store.
pub async fn schema_guard_with(bin: &Path, unreachable: Unreachable) {
    refuses_unknown_schemas(bin).await;
    let db = TestDb::new().await;
    exits_on_unreachable_store_and_bad_config(bin, &db, unreachable).await;
    runs_and_stops_on_the_known_schema(bin, &db).await;
}

/// Empty, ahead (Postgres or ClickHouse) or edited schemas: 78, saying what to do.
async fn refuses_unknown_schemas(bin: &Path) {
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
}

/// Unreachable Postgres: 75 (transient, restart me); a broken core setting: 78.
async fn exits_on_unreachable_store_and_bad_config(
    bin: &Path,
    db: &TestDb,
    unreachable: Unreachable,
) {
    // 5. Postgres unreachable: transient, restart me (or wait for it).
    let mut env = db.env();
    env.retain(|(k, _)| k != "PMW_POSTGRES_URL");
    env.push((
        "PMW_POSTGRES_URL".into(),
        "postgres://pmw@127.0.0.1:1/none".into(),
    ));
    if unreachable == Unreachable::Waits {
        let mut child = ChildService::start(bin, &env, &[]);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            child.is_running(),
            "with postgres unreachable the service must wait for it, not exit"
        );
        child.terminate();
        assert_eq!(
            child.wait_code(WITHIN).await,
            0,
            "SIGTERM while waiting for the stores must stop it cleanly"
        );
    } else {
        let (code, _, err) = run_bin(bin, &env, &[], WITHIN).await;
        assert_eq!(
            code, 75,
            "unreachable postgres must exit 75; stderr:\n{err}"
        );
    }

    // 6. A broken core setting is a configuration error.
    let mut env = db.env();
    env.push(("PMW_CLICKHOUSE_URL".into(), "not-a-url".into()));
    let (code, _, err) = run_bin(bin, &env, &[], WITHIN).await;
    assert_eq!(code, 78, "invalid config must exit 78; stderr:\n{err}");
}

/// The known schema: it starts, beats, and stops cleanly on SIGTERM.
async fn runs_and_stops_on_the_known_schema(bin: &Path, db: &TestDb) {
    let name = bin.file_name().unwrap().to_string_lossy().to_string();
    let child = RefCell::new(ChildService::start(bin, &db.env(), &[]));
    let client = db.connect().await;
    let beat = eventually(WITHIN, || async {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM heartbeats WHERE service = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            n == 1 || child.borrow_mut().is_running(),
            "{name} exited instead of running on a known schema"
        );
        n == 1
    })
    .await;
    assert!(beat, "{name} never wrote its heartbeat within {WITHIN:?}");
    let mut child = child.into_inner();
    child.terminate();
    assert_eq!(
        child.wait_code(WITHIN).await,
        0,
        "SIGTERM must stop {name} cleanly"
    );
}
