//! `POST /v1/webhooks/{id}/test` (a signed `test` event verified by the Python
//! `standardwebhooks` signer, the attempt's result for 2xx, non-2xx and no answer, the SSRF
//! guard, the per-account rate limit) and the `health` of `GET /v1/webhooks/{id}` (success rate
//! and last error from ClickHouse `delivery_log`, backlog from Postgres).

use pmw_api::ApiConfig;
use pmw_core::ch::latency::insert_all;
use pmw_core::ch::DeliveryLogRow;
use pmw_core::UnixMs;
use pmw_testkit::hooks::{python_signature_of, Receiver, Step};
use serde_json::json;

use crate::common::{test_config, Api};

async fn endpoint(api: &Api, key: &str, url: &str) -> (i64, String) {
    let r = api.post("/v1/webhooks", key, json!({ "url": url })).await;
    r.expect(201, None);
    (
        r.body["id"].as_i64().unwrap(),
        r.body["secret"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_event_is_signed_and_reports_the_attempt() {
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        api_webhook_test_per_min: 3,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let hook = Receiver::start(vec![Step::status(204), Step::status(500)]).await;
    let (ep, secret) = endpoint(&api, &key, &hook.url()).await;

    let r = api
        .post(&format!("/v1/webhooks/{ep}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert_eq!(r.body["delivered"], true, "{}", r.text);
    assert_eq!(r.body["status_code"], 204);
    assert!(r.body["error"].is_null());
    let hits = hook.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.id, r.body["webhook_id"]);
    let body = hit.json();
    assert_eq!(
        (body["type"].as_str(), body["endpoint_id"].as_i64()),
        (Some("test"), Some(ep))
    );
    let expected = python_signature_of(&secret, hit).await;
    assert_eq!(hit.signature, expected, "signed per Standard Webhooks");

    // A non-2xx answer: not delivered, with the status and the body's start.
    let r = api
        .post(&format!("/v1/webhooks/{ep}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert_eq!(
        (
            r.body["delivered"].as_bool(),
            r.body["status_code"].as_u64()
        ),
        (Some(false), Some(500))
    );
    assert!(
        r.body["error"].as_str().unwrap().contains("HTTP 500"),
        "{}",
        r.text
    );

    // Nobody listening: no status, the transport error.
    let (dead, _) = endpoint(&api, &key, "http://127.0.0.1:9/hook").await;
    let r = api
        .post(&format!("/v1/webhooks/{dead}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert!(
        r.body["status_code"].is_null() && r.body["error"].is_string(),
        "{}",
        r.text
    );

    // The fourth test this minute is limited; another account is not.
    let r = api
        .post(&format!("/v1/webhooks/{ep}/test"), &key, json!(null))
        .await;
    r.expect(429, Some("rate_limited"));
    assert!(r.headers.contains_key("retry-after"));
    let (_, other) = api.account("pro").await;
    api.post(&format!("/v1/webhooks/{ep}/test"), &other, json!(null))
        .await
        .expect(404, Some("not_found"));
    assert_eq!(hook.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_event_never_reaches_a_private_address() {
    let api = Api::start().await; // private destinations refused
    let (account, key) = api.account("pro").await;
    let hook = Receiver::start(vec![Step::status(204)]).await;
    // Stored before the rules changed (or by hand): the guard refuses it at send time.
    let c = api.db.pg.get().await.unwrap();
    let secret = pmw_core::webhook::Secret::generate().expose();
    let ep = pmw_testkit::seed::Endpoint::new(account, &hook.url(), &secret)
        .insert(&c)
        .await;
    let r = api
        .post(&format!("/v1/webhooks/{ep}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert_eq!(r.body["delivered"], false);
    assert!(
        r.body["error"].as_str().unwrap().contains("refused"),
        "{}",
        r.text
    );
    assert_eq!(hook.count(), 0);
}

fn attempt(endpoint: u64, i: u32, t: i64, ok: bool) -> DeliveryLogRow {
    DeliveryLogRow {
        delivery_id: format!("msg_{i:04}"),
        endpoint_id: endpoint,
        account_id: 1,
        attempt: 1,
        kind: "trade".into(),
        block_number: 100 + u64::from(i),
        log_index: i,
        t_attempt_ms: t,
        duration_ms: 12,
        status_code: if ok { 200 } else { 503 },
        outcome: if ok { "delivered" } else { "retry" }.into(),
        error: if ok {
            String::new()
        } else {
            format!("HTTP 503 #{i}")
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_health_shows_rate_last_error_and_backlog() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let (ep, _) = endpoint(&api, &key, "https://example.com/h").await;

    let r = api.get(&format!("/v1/webhooks/{ep}"), &key).await;
    r.expect(200, None);
    let h = &r.body["health"];
    assert_eq!(
        (h["attempts"].as_u64(), h["pending"].as_i64()),
        (Some(0), Some(0)),
        "{}",
        r.text
    );
    assert!(
        h["success_rate"].is_null() && h["last_error"].is_null() && h["failing_since_ms"].is_null()
    );

    // 3 delivered and 1 failed in the window, 1 failure older than it, another endpoint's.
    let now = UnixMs::now().0;
    let rows = vec![
        attempt(ep as u64, 1, now - 60_000, true),
        attempt(ep as u64, 2, now - 50_000, false),
        attempt(ep as u64, 3, now - 40_000, true),
        attempt(ep as u64, 4, now - 30_000, true),
        attempt(ep as u64, 5, now - 3 * 86_400_000, false),
        attempt(ep as u64 + 1, 6, now - 1_000, false),
    ];
    insert_all(&api.db.ch, "delivery_log", &rows).await.unwrap();
    // Two pending deliveries, one already retried; the endpoint failing for a minute.
    let c = api.db.pg.get().await.unwrap();
    for (i, attempts) in [(1, 0), (2, 3)] {
        c.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, \
             state, attempts, next_attempt_ms, t_detect_ms, created_ms) \
             VALUES ($1, $2, 'trade', 100, $3, '{}', 'pending', $4, 0, 0, $5)",
            &[&format!("msg_p{i}"), &ep, &i, &attempts, &(now - i64::from(i) * 1_000)],
        )
        .await
        .unwrap();
    }
    c.execute(
        "INSERT INTO webhook_failing (endpoint_id, since_ms) VALUES ($1, $2)",
        &[&ep, &(now - 60_000)],
    )
    .await
    .unwrap();

    let r = api.get(&format!("/v1/webhooks/{ep}"), &key).await;
    r.expect(200, None);
    let h = &r.body["health"];
    assert_eq!(
        (h["attempts"].as_u64(), h["delivered"].as_u64()),
        (Some(4), Some(3)),
        "{}",
        r.text
    );
    assert_eq!(h["success_rate"].as_f64(), Some(0.75));
    assert_eq!(h["last_error"]["error"], "HTTP 503 #2");
    assert_eq!(h["last_error"]["status_code"], 503);
    assert_eq!(
        (h["pending"].as_i64(), h["retrying"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(h["oldest_pending_ms"].as_i64(), Some(now - 2_000));
    assert_eq!(h["failing_since_ms"].as_i64(), Some(now - 60_000));
    assert_eq!(
        r.body["url"], "https://example.com/h",
        "the endpoint's fields stay"
    );
}
