//! Webhook endpoints: create with SSRF-checked URLs (refused ones store nothing), list, get,
//! enable/disable, secret rotation with overlap, delete, plan limit, the private-destination
//! setting; every change notifies push. (With push's dispatcher delivering: `tests/e2e`.)

use std::time::Duration;

use crate::common::{test_config, Api};
use pmw_api::ApiConfig;
use pmw_core::webhook::Secret;
use reqwest::Method;
use serde_json::json;

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
    // Stored sealed when this process has operator keys (PMW_SECRET_KEYS), as it is otherwise.
    let opened = pmw_core::sealed::open(&stored, ep).expect("the stored secret opens");
    assert_eq!((owner, opened.as_str()), (id, secret.as_str()));

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
    // Every field is optional (`{}` changes nothing), but the body must be an object, and an
    // empty event list is refused.
    let same = api
        .call(
            Method::PATCH,
            &format!("/v1/webhooks/{ep}"),
            Some(&key),
            Some(json!({})),
        )
        .await;
    same.expect(200, None);
    assert_eq!(same.body["enabled"], true);
    assert_eq!(same.body["events"], json!(["trade"]));
    api.call(
        Method::PATCH,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        Some(json!([true])),
    )
    .await
    .expect(422, Some("invalid_body"));
    api.call(
        Method::PATCH,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        Some(json!({"events": []})),
    )
    .await
    .expect(422, Some("invalid_events"));
    let fin = api
        .call(
            Method::PATCH,
            &format!("/v1/webhooks/{ep}"),
            Some(&key),
            Some(json!({"events": ["final", "trade"]})),
        )
        .await;
    fin.expect(200, None);
    assert_eq!(fin.body["events"], json!(["trade", "final"]));
    assert_eq!(
        fin.body["enabled"], true,
        "events change leaves enabled alone"
    );

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
    let open = |v: String| pmw_core::sealed::open(&v, ep).expect("the stored secret opens");
    assert_eq!(open(row.get(0)), new_secret);
    let previous = row.get::<_, Option<String>>(1).map(open);
    assert_eq!(previous.as_deref(), Some(secret.as_str()));
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
    // A JSON `null` is no body too; an array is not an object.
    api.post(
        &format!("/v1/webhooks/{ep}/rotate-secret"),
        &key,
        json!(null),
    )
    .await
    .expect(200, None);
    api.post(
        &format!("/v1/webhooks/{ep}/rotate-secret"),
        &key,
        json!([0]),
    )
    .await
    .expect(422, Some("invalid_body"));
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
    api.delete(&format!("/v1/webhooks/{ep}"), &other)
        .await
        .expect(404, Some("not_found"));
    api.get("/v1/webhooks/abc", &key)
        .await
        .expect(400, Some("invalid_path"));

    api.delete(&format!("/v1/webhooks/{ep}"), &key)
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
