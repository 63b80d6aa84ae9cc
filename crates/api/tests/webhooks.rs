//! Webhook endpoints: create with SSRF-checked URLs (refused ones store nothing), list, get,
//! enable/disable, secret rotation with overlap, delete, plan limit, the private-destination
//! setting; every change notifies push. Disabling expires pending deliveries (a re-enable sends
//! only new ones); an endpoint the dispatcher disabled for failing shows why, in the endpoint and
//! in its delivery log.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{test_config, Api};
use pmw_api::ApiConfig;
use pmw_core::Cursor;
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::{self, DeliveryKind, Dispatcher, NewDelivery, WebhookConfig};
use reqwest::Method;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const COUNT: &str = "SELECT count(*) FROM webhook_endpoints";

async fn notified(l: &mut pmw_core::pg::Session) {
    tokio::time::timeout(Duration::from_secs(5), l.notifications.recv())
        .await
        .expect("push notified")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssrf_urls_are_422_and_store_nothing() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    for url in [
        "http://127.1/",
        "http://127.0.0.1:8080/hook",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://0/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.10/",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://localhost:9000/",
        "http://metadata.google.internal/",
        "ftp://example.com/",
        "file:///etc/passwd",
        "http://user:pw@example.com/",
        "not a url",
        "",
    ] {
        let r = api.post("/v1/webhooks", &key, json!({ "url": url })).await;
        assert_eq!(r.status.as_u16(), 422, "{url}: {}", r.text);
        assert_eq!(r.code(), "invalid_url", "{url}");
    }
    let long = format!("https://example.com/{}", "a".repeat(3000));
    api.post("/v1/webhooks", &key, json!({ "url": long }))
        .await
        .expect(422, Some("invalid_url"));
    api.post(
        "/v1/webhooks",
        &key,
        json!({ "url": "https://example.com/", "secret": "mine" }),
    )
    .await
    .expect(422, Some("invalid_body"));
    api.post("/v1/webhooks", &key, json!({ "url": 5 }))
        .await
        .expect(422, Some("invalid_body"));
    assert_eq!(api.count(COUNT).await, 0, "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_lifecycle_with_secret_rotation() {
    let api = Api::start().await;
    let (id, key) = api.account("pro").await;
    let mut listen = pmw_core::pg::dedicated(&api.db.cfg, "test-listen")
        .await
        .unwrap();
    listen
        .client
        .batch_execute("LISTEN pmw_subscriptions")
        .await
        .unwrap();

    let r = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://Example.com:443/hooks/pmw"}),
        )
        .await;
    r.expect(201, None);
    notified(&mut listen).await;
    let ep = r.body["id"].as_i64().unwrap();
    assert_eq!(
        r.body["url"], "https://example.com/hooks/pmw",
        "stored normalised"
    );
    assert_eq!(r.body["enabled"], true);
    let secret = r.body["secret"].as_str().unwrap().to_string();
    Secret::parse(&secret).expect("a Standard Webhooks secret");
    let c = api.db.pg.get().await.unwrap();
    let (owner, stored): (i64, String) = c
        .query_one(
            "SELECT account_id, secret FROM webhook_endpoints WHERE id = $1",
            &[&ep],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((owner, stored.as_str()), (id, secret.as_str()));

    // Listed and fetched without the secret.
    let list = api.get("/v1/webhooks", &key).await;
    list.expect(200, None);
    assert_eq!(list.body["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["limit"], 10);
    assert!(!list.text.contains(&secret));
    let one = api.get(&format!("/v1/webhooks/{ep}"), &key).await;
    one.expect(200, None);
    assert!(!one.text.contains(&secret) && one.body.get("secret").is_none());

    // Disable, enable.
    let off = api
        .call(
            Method::PATCH,
            &format!("/v1/webhooks/{ep}"),
            Some(&key),
            Some(json!({"enabled": false})),
        )
        .await;
    off.expect(200, None);
    assert_eq!(off.body["enabled"], false);
    assert!(off.body["disabled_reason"].is_string());
    notified(&mut listen).await;
    let on = api
        .call(
            Method::PATCH,
            &format!("/v1/webhooks/{ep}"),
            Some(&key),
            Some(json!({"enabled": true})),
        )
        .await;
    on.expect(200, None);
    assert!(on.body["disabled_reason"].is_null());
    notified(&mut listen).await;
    api.call(
        Method::PATCH,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        Some(json!({"enabled": "yes"})),
    )
    .await
    .expect(422, Some("invalid_body"));
    api.call(
        Method::PATCH,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        Some(json!({})),
    )
    .await
    .expect(422, Some("invalid_body"));

    // Rotate with a 1 h overlap: the previous secret keeps signing until then.
    let rot = api
        .post(
            &format!("/v1/webhooks/{ep}/rotate-secret"),
            &key,
            json!({"overlap_secs": 3600}),
        )
        .await;
    rot.expect(200, None);
    notified(&mut listen).await;
    let new_secret = rot.body["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    let until = rot.body["previous_expires_ms"].as_i64().unwrap();
    assert!((until - pmw_core::UnixMs::now().0 - 3_600_000).abs() < 10_000);
    let row = c
        .query_one("SELECT secret, previous_secret, previous_expires_ms FROM webhook_endpoints WHERE id = $1", &[&ep])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), new_secret);
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some(secret.as_str())
    );
    assert_eq!(row.get::<_, Option<i64>>(2), Some(until));
    // Default overlap (no body), too-long overlap refused, zero overlap drops the previous one.
    api.call(
        Method::POST,
        &format!("/v1/webhooks/{ep}/rotate-secret"),
        Some(&key),
        None,
    )
    .await
    .expect(200, None);
    api.post(
        &format!("/v1/webhooks/{ep}/rotate-secret"),
        &key,
        json!({"overlap_secs": 10_000_000}),
    )
    .await
    .expect(422, Some("invalid_overlap"));
    let z = api
        .post(
            &format!("/v1/webhooks/{ep}/rotate-secret"),
            &key,
            json!({"overlap_secs": 0}),
        )
        .await;
    z.expect(200, None);
    assert!(z.body["previous_expires_ms"].is_null());

    // Another account cannot see or touch it.
    let (_, other) = api.account("pro").await;
    api.get(&format!("/v1/webhooks/{ep}"), &other)
        .await
        .expect(404, Some("not_found"));
    api.call(
        Method::DELETE,
        &format!("/v1/webhooks/{ep}"),
        Some(&other),
        None,
    )
    .await
    .expect(404, Some("not_found"));
    api.get("/v1/webhooks/abc", &key)
        .await
        .expect(400, Some("invalid_path"));

    api.call(
        Method::DELETE,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        None,
    )
    .await
    .expect(204, None);
    notified(&mut listen).await;
    api.get(&format!("/v1/webhooks/{ep}"), &key)
        .await
        .expect(404, Some("not_found"));
    assert_eq!(api.count(COUNT).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_plan_limit_and_private_destinations_setting() {
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("free").await; // free: 1 endpoint
    api.post(
        "/v1/webhooks",
        &key,
        json!({"url": "http://127.0.0.1:9/hook"}),
    )
    .await
    .expect(201, None);
    let r = api
        .post("/v1/webhooks", &key, json!({"url": "http://[::1]:9/hook"}))
        .await;
    r.expect(403, Some("plan_limit"));
    assert_eq!(api.count(COUNT).await, 1);
    // Scheme and userinfo rules hold even when private destinations are allowed.
    let (_, pro) = api.account("pro").await;
    api.post("/v1/webhooks", &pro, json!({"url": "gopher://127.0.0.1/"}))
        .await
        .expect(422, Some("invalid_url"));
    api.post(
        "/v1/webhooks",
        &pro,
        json!({"url": "http://a:b@127.0.0.1/"}),
    )
    .await
    .expect(422, Some("invalid_url"));
    assert_eq!(api.count(COUNT).await, 1);
}

/// A webhook receiver on 127.0.0.1:0 answering every request with one status; it records the
/// `webhook-id` of each request.
struct Hooks {
    url: String,
    ids: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn hooks(status: u16) -> Hooks {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = ids.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let seen = seen.clone();
        async move {
            let id = headers
                .get("webhook-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            seen.lock().unwrap().push(id);
            axum::http::StatusCode::from_u16(status).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Hooks { url, ids, task }
}

/// The API with private destinations allowed, a pro account, push epoch 1 of slot 0, and an
/// endpoint at `url` created through the API.
async fn with_endpoint(url: &str) -> (Api, String, i64) {
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES (0, 1, 'test', 0)",
        &[],
    )
    .await
    .unwrap();
    let r = api.post("/v1/webhooks", &key, json!({ "url": url })).await;
    r.expect(201, None);
    let ep = r.body["id"].as_i64().unwrap();
    (api, key, ep)
}

/// Enqueue one trade delivery per block for `endpoint` through push's own enqueue.
async fn enqueue(api: &Api, endpoint: i64, blocks: &[u64]) -> Vec<String> {
    let items: Vec<NewDelivery> = blocks
        .iter()
        .map(|b| {
            let cursor = Cursor::new(*b, 0).unwrap();
            NewDelivery {
                id: webhook::webhook_id(cursor, "0xfeedbeef", endpoint, DeliveryKind::Trade),
                endpoint_id: endpoint,
                kind: DeliveryKind::Trade,
                cursor,
                payload: json!({"type": "trade", "cursor": cursor}),
                t_detect_ms: 1_000,
            }
        })
        .collect();
    let mut c = api.db.pg.get().await.unwrap();
    let tx = c.transaction().await.unwrap();
    let n = webhook::enqueue(&tx, 1, &items).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(n as usize, items.len());
    items.into_iter().map(|d| d.id).collect()
}

/// `(state, attempts, last_error)` of a delivery.
async fn delivery(api: &Api, id: &str) -> (String, i32, Option<String>) {
    let c = api.db.pg.get().await.unwrap();
    let r = c
        .query_one(
            "SELECT state, attempts, last_error FROM webhook_deliveries WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

fn dispatcher_config(disable_after: Option<Duration>) -> WebhookConfig {
    WebhookConfig {
        allow_private_destinations: true,
        poll_interval: Duration::from_millis(200),
        max_in_flight_per_endpoint: 1,
        disable_failing_after: disable_after,
        ..WebhookConfig::default()
    }
}

async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !f().await {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_expires_pending_deliveries_and_reenabling_sends_only_new_ones() {
    let rx = hooks(204).await;
    let (api, key, ep) = with_endpoint(&rx.url).await;
    let path = format!("/v1/webhooks/{ep}");
    let old = enqueue(&api, ep, &[100, 101, 102]).await;

    let off = api
        .call(
            Method::PATCH,
            &path,
            Some(&key),
            Some(json!({"enabled": false})),
        )
        .await;
    off.expect(200, None);
    assert_eq!(off.body["disabled_reason"], "disabled by the account");
    for id in &old {
        let (state, attempts, error) = delivery(&api, id).await;
        assert_eq!((state.as_str(), attempts), ("failed", 0), "{id}");
        assert_eq!(
            error.as_deref(),
            Some("endpoint disabled: disabled by the account")
        );
    }
    // A push round that raced the disable (its snapshot still saw the endpoint enabled) can
    // leave a pending row behind: the re-enable expires it too.
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, \
           state, attempts, next_attempt_ms, t_detect_ms, created_ms) \
         VALUES ('msg_straggler', $1, 'trade', 103, 0, '{}', 'pending', 0, 0, 0, 0)",
        &[&ep],
    )
    .await
    .unwrap();
    let on = api
        .call(
            Method::PATCH,
            &path,
            Some(&key),
            Some(json!({"enabled": true})),
        )
        .await;
    on.expect(200, None);
    assert!(on.body["disabled_reason"].is_null());
    let (state, _, error) = delivery(&api, "msg_straggler").await;
    assert_eq!(
        (state.as_str(), error.as_deref()),
        ("failed", Some("endpoint disabled: queued while disabled"))
    );

    let new = enqueue(&api, ep, &[104]).await;
    let d = Dispatcher::spawn(
        api.db.pg.clone(),
        api.db.ch.clone(),
        1,
        dispatcher_config(None),
        CancellationToken::new(),
    );
    d.wake();
    assert!(
        eventually(Duration::from_secs(30), || async {
            delivery(&api, &new[0]).await.0 == "delivered"
        })
        .await,
        "the delivery queued after the re-enable is sent"
    );
    let pending = api
        .count(&format!(
            "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = {ep} AND state = 'pending'"
        ))
        .await;
    assert_eq!(pending, 0);
    d.stop().await.unwrap();
    assert_eq!(
        *rx.ids.lock().unwrap(),
        new,
        "only the new delivery reached the receiver"
    );
    for id in &old {
        assert_eq!(delivery(&api, id).await.0, "failed", "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_failing_for_the_period_shows_disabled_with_its_reason() {
    let rx = hooks(500).await;
    let (api, key, ep) = with_endpoint(&rx.url).await;
    let path = format!("/v1/webhooks/{ep}");
    enqueue(&api, ep, &[200]).await;
    let d = Dispatcher::spawn(
        api.db.pg.clone(),
        api.db.ch.clone(),
        1,
        dispatcher_config(Some(Duration::from_secs(2))),
        CancellationToken::new(),
    );
    d.wake();
    // The first attempt fails; its retry, about 5 s later, is past the 2 s period.
    assert!(
        eventually(Duration::from_secs(60), || async {
            api.get(&path, &key).await.body["enabled"] == false
        })
        .await,
        "the always-failing endpoint is disabled"
    );
    d.stop().await.unwrap();
    let got = api.get(&path, &key).await;
    got.expect(200, None);
    let reason = got.body["disabled_reason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        reason.starts_with("every delivery attempt failed since ")
            && reason.contains("(limit 2 s)")
            && reason.contains("http 500"),
        "{reason}"
    );
    let listed = api.get("/v1/webhooks", &key).await;
    assert_eq!(
        listed.body["endpoints"][0]["disabled_reason"],
        reason.as_str()
    );
    // The delivery log, newest first, shows the attempt that disabled it.
    let log_path = format!("/v1/webhooks/{ep}/deliveries");
    assert!(
        eventually(Duration::from_secs(30), || async {
            api.get(&log_path, &key).await.body["attempts"]
                .as_array()
                .is_some_and(|a| a.len() == 2)
        })
        .await,
        "both attempts logged"
    );
    let log = api.get(&log_path, &key).await;
    let newest = &log.body["attempts"][0];
    assert_eq!(newest["attempt"], 2);
    let error = newest["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("http 500; endpoint disabled: every delivery attempt failed since"),
        "{error}"
    );
    assert_eq!(log.body["attempts"][1]["error"], "http 500");
    // Re-enabling starts afresh: the run of failures is forgotten.
    api.call(
        Method::PATCH,
        &path,
        Some(&key),
        Some(json!({"enabled": true})),
    )
    .await
    .expect(200, None);
    assert_eq!(api.count("SELECT count(*) FROM webhook_failing").await, 0);
}
