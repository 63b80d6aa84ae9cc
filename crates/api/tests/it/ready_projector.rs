//! `/v1/ready` reports ClickHouse behind the Postgres hot ledger (issue 29): a hot-ledger row
//! committed two minutes ago that the projector has not copied makes `checks.projector` fail
//! with the lag and adds a warning, never a 503 reason; once projected, the check passes.

use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::UnixMs;

use crate::common::{test_config, Api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_behind_the_hot_ledger_is_a_warning_of_ready() {
    let api = Api::start_with(ApiConfig {
        api_ready_interval_ms: 100,
        ..test_config()
    })
    .await;
    let r = api
        .until(
            "/v1/ready",
            Duration::from_secs(10),
            "the projector check",
            |r| r.body["checks"]["projector"]["ok"] == true,
        )
        .await;
    assert_eq!(r.body["checks"]["projector"]["detail"]["lag_rows"], 0);

    // A row committed two minutes ago, not projected (no live runs here).
    let c = api.db.connect().await;
    pmw_testkit::rows::plant(&c, &[pmw_testkit::rows::trade(7, 0, "0x07")]).await;
    c.execute(
        "UPDATE ledger SET committed_ms = $1",
        &[&(UnixMs::now().0 - 120_000)],
    )
    .await
    .unwrap();
    let r = api
        .until(
            "/v1/ready",
            Duration::from_secs(10),
            "clickhouse behind",
            |r| r.body["checks"]["projector"]["ok"] == false,
        )
        .await;
    let check = &r.body["checks"]["projector"];
    assert_eq!(check["detail"]["lag_rows"], 1, "{}", r.text);
    assert!(check["detail"]["lag_ms"].as_i64().unwrap() >= 120_000);
    let reason = check["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("clickhouse is 12") && reason.contains("behind the hot ledger (1 rows)"),
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
    assert!(!r.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("clickhouse is"));

    // Projected (the projector moved its cursor): the check passes again.
    c.execute(
        "UPDATE stored_cursor SET seq = (SELECT seq FROM ledger_head)",
        &[],
    )
    .await
    .unwrap();
    api.until("/v1/ready", Duration::from_secs(10), "caught up", |r| {
        r.body["checks"]["projector"]["ok"] == true
    })
    .await;
}
