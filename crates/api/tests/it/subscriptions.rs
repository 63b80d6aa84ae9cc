//! Subscriptions: add (idempotent), list, remove; bad addresses, bad bodies and plan limits are
//! refused with the exact status and store nothing; every change notifies push at commit.

use std::time::Duration;

use crate::common::{wallet, Api};
use reqwest::Method;
use serde_json::json;

const COUNT: &str = "SELECT count(*) FROM subscriptions";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_list_remove_idempotent_and_notified() {
    let api = Api::start().await;
    let (_, key) = api.account("free").await;
    let mut listen = pmw_core::pg::dedicated(&api.db.cfg, "test-listen")
        .await
        .unwrap();
    listen
        .client
        .batch_execute("LISTEN pmw_subscriptions")
        .await
        .unwrap();

    // EIP-55 checksummed input (from the EIP's own vectors) is stored lowercase.
    let checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
    let r = api
        .post(
            "/v1/subscriptions",
            &key,
            json!({"wallet": checksummed, "label": "whale"}),
        )
        .await;
    r.expect(201, None);
    assert_eq!(r.body["wallet"], checksummed.to_lowercase());
    let n = tokio::time::timeout(Duration::from_secs(5), listen.notifications.recv())
        .await
        .expect("push is notified when the subscription commits")
        .unwrap();
    assert_eq!(n.channel(), "pmw_subscriptions");

    // The same wallet again (any case form): 200, nothing new, no notification.
    let again = api
        .post(
            "/v1/subscriptions",
            &key,
            json!({"wallet": checksummed.to_lowercase()}),
        )
        .await;
    again.expect(200, None);
    assert_eq!(again.body["label"], "whale");
    assert_eq!(api.count(COUNT).await, 1);
    let c = api.db.pg.get().await.unwrap();
    let stored: Vec<u8> = c
        .query_one("SELECT wallet FROM subscriptions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        format!("0x{}", hex::encode(stored)),
        checksummed.to_lowercase()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listen.notifications.recv())
            .await
            .is_err()
    );

    api.post("/v1/subscriptions", &key, json!({"wallet": wallet(2)}))
        .await
        .expect(201, None);
    let list = api.get("/v1/subscriptions", &key).await;
    list.expect(200, None);
    assert_eq!(list.body["subscriptions"].as_array().unwrap().len(), 2);
    assert_eq!(list.body["limit"], 10);
    let _ = listen.notifications.recv().await;

    // Remove (by checksummed or lowercase form), then 404 for a wallet not followed.
    api.delete(&format!("/v1/subscriptions/{checksummed}"), &key)
        .await
        .expect(204, None);
    tokio::time::timeout(Duration::from_secs(5), listen.notifications.recv())
        .await
        .expect("removal notifies push")
        .unwrap();
    api.delete(&format!("/v1/subscriptions/{checksummed}"), &key)
        .await
        .expect(404, Some("not_found"));
    api.delete("/v1/subscriptions/0x1234", &key)
        .await
        .expect(422, Some("invalid_address"));
    assert_eq!(api.count(COUNT).await, 1);

    // Another account sees only its own.
    let (_, other) = api.account("free").await;
    let list = api.get("/v1/subscriptions", &other).await;
    assert_eq!(list.body["subscriptions"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_addresses_and_bodies_store_nothing() {
    let api = Api::start().await;
    let (_, key) = api.account("free").await;
    let good = wallet(1);
    // Malformed and wrong-checksum addresses: 422 invalid_address.
    for bad in [
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", // one letter's case flipped: bad checksum
        "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "5aaeb6053f3e94c9b9a09f33669435e7ef1beaed", // no 0x
        "0x5aaeb6053f3e94c9b9a09f33669435e7ef1bea", // 38 digits
        "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed00",
        "0xzzaeb6053f3e94c9b9a09f33669435e7ef1beaed",
        "",
        "0x",
    ] {
        let r = api
            .post("/v1/subscriptions", &key, json!({"wallet": bad}))
            .await;
        r.expect(422, Some("invalid_address"));
    }
    // Bad bodies: syntax 400, wrong types / missing / unknown fields 422, no JSON type 415,
    // oversized 413.
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "application/json",
            b"{\"wallet\": ".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            b"not json".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            b"{\"wallet\": 42}".to_vec(),
            422,
            "invalid_body",
        ),
        (
            "application/json",
            b"{\"wallet\": [\"0x\"]}".to_vec(),
            422,
            "invalid_body",
        ),
        ("application/json", b"{}".to_vec(), 422, "invalid_body"),
        ("application/json", b"[]".to_vec(), 422, "invalid_body"),
        ("application/json", b"null".to_vec(), 422, "invalid_body"),
        (
            "application/json",
            format!("{{\"wallet\":\"{good}\",\"admin\":true}}").into_bytes(),
            422,
            "invalid_body",
        ),
        (
            "application/json",
            format!("{{\"wallet\":\"{good}\",\"label\":7}}").into_bytes(),
            422,
            "invalid_body",
        ),
        (
            "text/plain",
            format!("{{\"wallet\":\"{good}\"}}").into_bytes(),
            415,
            "unsupported_media_type",
        ),
        (
            "application/json",
            format!(
                "{{\"wallet\":\"{good}\",\"label\":\"{}\"}}",
                "x".repeat(70_000)
            )
            .into_bytes(),
            413,
            "body_too_large",
        ),
        (
            "application/json",
            format!(
                "{{\"wallet\":\"{good}\",\"label\":\"{}\"}}",
                "x".repeat(300)
            )
            .into_bytes(),
            422,
            "invalid_label",
        ),
    ];
    for (ct, body, status, code) in cases {
        let r = api
            .raw(Method::POST, "/v1/subscriptions", Some(&key), ct, body)
            .await;
        r.expect(status, Some(code));
    }
    assert_eq!(api.count(COUNT).await, 0, "nothing stored");
    // Unknown routes and methods keep the error shape.
    api.get("/v1/nope", &key)
        .await
        .expect(404, Some("not_found"));
    let r = api
        .call(Method::PUT, "/v1/subscriptions", Some(&key), None)
        .await;
    r.expect(405, Some("method_not_allowed"));
    assert!(r.headers.contains_key("allow"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_limit_on_wallets_is_403_and_stores_nothing() {
    let mut cfg = crate::common::test_config();
    cfg.api_plans.insert(
        "tiny".into(),
        pmw_core::plans::Plan {
            max_wallets: 2,
            max_webhook_endpoints: 0,
            max_ws_sessions: 1,
            max_markets: 1,
            market_min_collateral: "0".into(),
        },
    );
    let api = Api::start_with(cfg).await;
    let (_, key) = api.account("tiny").await;
    api.post("/v1/subscriptions", &key, json!({"wallet": wallet(1)}))
        .await
        .expect(201, None);
    api.post("/v1/subscriptions", &key, json!({"wallet": wallet(2)}))
        .await
        .expect(201, None);
    let r = api
        .post("/v1/subscriptions", &key, json!({"wallet": wallet(3)}))
        .await;
    r.expect(403, Some("plan_limit"));
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2 wallets"),
        "{}",
        r.text
    );
    // A wallet already followed is still fine at the limit (idempotent).
    api.post("/v1/subscriptions", &key, json!({"wallet": wallet(2)}))
        .await
        .expect(200, None);
    assert_eq!(api.count(COUNT).await, 2);
    // Concurrent adds cannot overshoot the limit.
    api.delete(&format!("/v1/subscriptions/{}", wallet(1)), &key)
        .await
        .expect(204, None);
    let adds =
        (10..20u8).map(|i| api.post("/v1/subscriptions", &key, json!({"wallet": wallet(i)})));
    let results = futures::future::join_all(adds).await;
    assert_eq!(
        results.iter().filter(|r| r.status.as_u16() == 201).count(),
        1
    );
    assert_eq!(api.count(COUNT).await, 2);
}
