//! `pmwctl status` reports an index Postgres does not use (issue 28 item 6): a `CREATE UNIQUE
//! INDEX CONCURRENTLY` that fails on duplicates leaves an invalid index behind, shown in
//! `indexes` and as a warning (JSON and text); none on a freshly migrated database.

use std::path::Path;
use std::time::Duration;

use pmw_core::UnixMs;
use pmw_testkit::{run_bin, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_pmwctl");

async fn status(db: &TestDb, args: &[&str]) -> String {
    let (code, out, err) = run_bin(Path::new(BIN), &db.env(), args, Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_an_invalid_index() {
    let db = TestDb::new().await;
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    assert_eq!(v["indexes"], serde_json::json!([]), "{v}");
    let text = status(&db, &["status"]).await;
    assert!(
        text.contains("indexes       all valid and ready\n"),
        "{text}"
    );

    let c = db.connect().await;
    let now = UnixMs::now().0;
    for _ in 0..2 {
        c.execute(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ('twin', 'free', $1)",
            &[&now],
        )
        .await
        .unwrap();
    }
    c.batch_execute("CREATE UNIQUE INDEX CONCURRENTLY accounts_name_u ON accounts (name)")
        .await
        .expect_err("a unique index over duplicates cannot be built");

    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    let broken = v["indexes"].as_array().expect("a list");
    assert_eq!(broken.len(), 1, "{v}");
    assert_eq!(broken[0]["index"], "accounts_name_u");
    assert_eq!(broken[0]["table"], "accounts");
    assert_eq!(
        (&broken[0]["valid"], &broken[0]["unique"]),
        (&false.into(), &true.into())
    );
    let warned: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        warned
            .iter()
            .any(|w| w.starts_with("index accounts_name_u on accounts is invalid")),
        "{warned:?}"
    );
    let text = status(&db, &["status"]).await;
    assert!(
        text.contains("indexes       1 not valid or not ready: accounts_name_u (see warnings)\n"),
        "{text}"
    );
    assert!(
        text.contains("WARNING       index accounts_name_u on accounts is invalid"),
        "{text}"
    );
}

/// Issue 42 item 5: a service running without `PMW_SECRET_KEYS` (its heartbeat says so) is
/// named in a warning of `pmwctl status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_warns_of_a_service_running_without_secret_keys() {
    // This process is the service: no keys (before anything reads them).
    std::env::remove_var(pmw_core::sealed::ENV);
    let db = TestDb::new().await;
    let warned = |v: &serde_json::Value| {
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w.as_str())
            .any(|w| w.starts_with("PMW_SECRET_KEYS is unset") && w.contains("pmw-api/api"))
    };
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    assert!(!warned(&v), "no service, no warning: {v}");
    let hb = pmw_core::heartbeat::Heartbeat::new(db.pg.clone(), "pmw-api", "api");
    hb.beat(&serde_json::json!({"role": "api"})).await.unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    assert!(warned(&v), "{}", v["warnings"]);
    let text = status(&db, &["status"]).await;
    assert!(text.contains("PMW_SECRET_KEYS is unset"), "{text}");
}

/// Issue 45 item 4: an unlisted emitter pmw-live recorded is listed in `unlisted_emitters`
/// and warned about (JSON and text) until live lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_an_unlisted_emitter_until_listed() {
    use pmw_core::pg::emitters::{mark_listed, record, Sighting, Sightings, Source};
    let db = TestDb::new().await;
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    assert_eq!(v["unlisted_emitters"]["count"], 0, "{v}");
    assert!(status(&db, &["status"])
        .await
        .contains("emitters      no unlisted emitter\n"));

    let c = db.connect().await;
    let emitter = pmw_core::types::Address([0x7e; 20]);
    let hex = emitter.to_lower_hex();
    let seen = Sightings::from([(
        emitter,
        Sighting {
            first_block: 300,
            last_block: 302,
            events: 5,
            first_tx: format!("0x{}", "cd".repeat(32)),
        },
    )]);
    record(&c, &seen, Source::Ingest, UnixMs::now().0)
        .await
        .unwrap();
    record(&c, &seen, Source::Audit, UnixMs::now().0)
        .await
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    let e = &v["unlisted_emitters"]["emitters"][0];
    assert_eq!(v["unlisted_emitters"]["count"], 1, "{v}");
    assert_eq!(e["address"], hex.as_str());
    assert_eq!(
        (
            e["first_block"].as_i64(),
            e["events"].as_i64(),
            e["audit_events"].as_i64()
        ),
        (Some(300), Some(5), Some(5))
    );
    let warned = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| {
            w.contains(&format!(
                "{hex} (from block 300, 5 events, 5 in audited blocks)"
            ))
        })
        .count();
    assert_eq!(warned, 1, "{v}");
    let text = status(&db, &["status"]).await;
    assert!(text.contains("emitters      1 unlisted"), "{text}");
    assert!(
        text.contains(&format!("  {hex} blocks 300-302, 5 events at ingest")),
        "{text}"
    );
    assert!(
        text.contains("WARNING       1 unlisted contract(s)"),
        "{text}"
    );

    mark_listed(&c, &[emitter], UnixMs::now().0).await.unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    assert_eq!(v["unlisted_emitters"]["count"], 0, "listed: {v}");
}

/// The live and stats pairs (issue 44): the live writer's holder and epoch (a real lock and
/// epoch taken), its standby waiting, and a warning for the pair without a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_live_and_stats_pairs_and_warns_without_a_standby() {
    let db = TestDb::new().await;
    let none = tokio_util::sync::CancellationToken::new();
    let mut lock = pmw_core::lock::WriterLock::acquire(
        &db.cfg,
        "pmw-live:lock",
        pmw_core::lock::keys::LIVE,
        Duration::from_millis(200),
        &none,
    )
    .await
    .unwrap()
    .unwrap();
    let epoch = lock.take_epoch("live").await.unwrap();
    let standby = pmw_core::heartbeat::Heartbeat::new(db.pg.clone(), "pmw-live", "live-b");
    standby
        .beat(&serde_json::json!({"role": "standby"}))
        .await
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&status(&db, &["status", "--json"]).await).unwrap();
    let live = &v["pairs"][0];
    assert_eq!(live["holder"]["instance"], "live", "{v}");
    assert_eq!(live["holder"]["epoch"], epoch, "{v}");
    assert_eq!(live["standbys"][0]["instance"], "live-b", "{v}");
    let warnings = v["warnings"].to_string();
    assert!(!warnings.contains("no pmw-live standby"), "{warnings}");
    assert!(warnings.contains("no pmw-stats standby"), "{warnings}");
    let text = status(&db, &["status"]).await;
    assert!(
        text.contains(&format!("live  writer  live (epoch {epoch}")),
        "{text}"
    );
    assert!(text.contains("live  standby live-b (pid "), "{text}");
    assert!(text.contains("stats standby none"), "{text}");
    lock.release().await.unwrap();
}
