//! `/v1/ready` reports an index Postgres does not use (issue 28 item 6): a `CREATE UNIQUE INDEX
//! CONCURRENTLY` that fails on duplicates leaves an invalid index behind; the detailed answer
//! names it in `checks.indexes` and `warnings`, and it never gates readiness on its own.

use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::UnixMs;

use crate::common::{test_config, Api};

/// Two accounts with the same name, then a unique index on the name built concurrently: the
/// build fails on the duplicate and leaves `index` behind, invalid.
pub async fn leave_invalid_index(c: &tokio_postgres::Client, index: &str) {
    let now = UnixMs::now().0;
    for _ in 0..2 {
        c.execute(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ('twin', 'free', $1)",
            &[&now],
        )
        .await
        .unwrap();
    }
    let e = c
        .batch_execute(&format!(
            "CREATE UNIQUE INDEX CONCURRENTLY {index} ON accounts (name)"
        ))
        .await
        .expect_err("a unique index over duplicates cannot be built");
    assert_eq!(
        e.as_db_error().map(|d| d.code().code()),
        Some("23505"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_index_is_a_warning_of_ready() {
    let api = Api::start_with(ApiConfig {
        api_ready_interval_ms: 100,
        ..test_config()
    })
    .await;
    // Every index the migrations made is valid and ready.
    let r = api
        .until(
            "/v1/ready",
            Duration::from_secs(10),
            "the index check",
            |r| r.body["checks"]["indexes"]["ok"] == true,
        )
        .await;
    assert_eq!(
        r.body["checks"]["indexes"]["detail"]["broken"],
        serde_json::json!([])
    );

    let c = api.db.connect().await;
    leave_invalid_index(&c, "accounts_name_u").await;
    let r = api
        .until(
            "/v1/ready",
            Duration::from_secs(10),
            "a broken index",
            |r| r.body["checks"]["indexes"]["ok"] == false,
        )
        .await;
    let check = &r.body["checks"]["indexes"];
    let broken = &check["detail"]["broken"];
    assert_eq!(broken.as_array().map(Vec::len), Some(1), "{}", r.text);
    assert_eq!(broken[0]["index"], "accounts_name_u");
    assert_eq!(broken[0]["table"], "accounts");
    assert_eq!(broken[0]["valid"], false);
    assert_eq!(broken[0]["unique"], true);
    let reason = check["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("index accounts_name_u on accounts is invalid"),
        "{reason}"
    );
    assert!(
        r.body["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == reason),
        "{}",
        r.text
    );
    // A warning only: not among the gating reasons (no live, no push here).
    assert!(!r.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("accounts_name_u"));

    // Dropped: valid again.
    c.batch_execute("DROP INDEX accounts_name_u").await.unwrap();
    api.until(
        "/v1/ready",
        Duration::from_secs(10),
        "no broken index",
        |r| r.body["checks"]["indexes"]["ok"] == true,
    )
    .await;
}
