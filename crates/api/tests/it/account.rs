//! `/v1/me`, API keys (several per account, shown once, revocation), authentication failures,
//! per-key rate limits (429 + Retry-After), browser WebSocket tickets and their plan limit.

use crate::common::{test_config, Api};
use pmw_api::ApiConfig;
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn me_and_keys_round_trip_with_revocation() {
    let api = Api::start().await;
    let (id, key) = api.account("pro").await;

    let me = api.get("/v1/me", &key).await;
    me.expect(200, None);
    assert_eq!(me.body["account"]["id"], id);
    assert_eq!(me.body["plan"]["name"], "pro");
    assert_eq!(me.body["plan"]["max_wallets"], 500);
    assert_eq!(me.body["usage"]["wallets"], 0);
    assert_eq!(me.body["key_prefix"], &key[..12]);

    // A second key, shown once, listed by prefix only.
    let created = api.post("/v1/keys", &key, json!({"label": "ci"})).await;
    created.expect(201, None);
    let key2 = created.body["key"].as_str().unwrap().to_string();
    assert!(key2.starts_with("pmw_") && key2.len() == 68);
    let prefix2 = created.body["prefix"].as_str().unwrap().to_string();
    let list = api.get("/v1/keys", &key2).await;
    list.expect(200, None);
    let keys = list.body["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert!(
        !list.text.contains(&key2[12..]),
        "the key itself is never listed"
    );
    let stored: i64 = api
        .count(&format!(
            "SELECT count(*) FROM api_keys WHERE prefix = '{prefix2}' AND label = 'ci'"
        ))
        .await;
    assert_eq!(stored, 1);

    // An empty body works too (label defaults to "").
    api.call(Method::POST, "/v1/keys", Some(&key), None)
        .await
        .expect(201, None);

    // Revoke the second key: it stops working at once, the first keeps working.
    api.delete(&format!("/v1/keys/{prefix2}"), &key)
        .await
        .expect(204, None);
    api.get("/v1/me", &key2)
        .await
        .expect(401, Some("unauthorized"));
    api.get("/v1/me", &key).await.expect(200, None);
    // Revoking again, or a key of another account, is 404.
    api.delete(&format!("/v1/keys/{prefix2}"), &key)
        .await
        .expect(404, Some("not_found"));
    let (_, other) = api.account("free").await;
    api.delete(&format!("/v1/keys/{}", &key[..12]), &other)
        .await
        .expect(404, Some("not_found"));
    api.get("/v1/me", &key).await.expect(200, None);
    // Unknown fields in the body are rejected and store nothing.
    let before = api.count("SELECT count(*) FROM api_keys").await;
    api.post("/v1/keys", &key, json!({"label": "x", "admin": true}))
        .await
        .expect(422, Some("invalid_body"));
    assert_eq!(api.count("SELECT count(*) FROM api_keys").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_missing_and_malformed_credentials_are_401() {
    let api = Api::start().await;
    let (_, key) = api.account("free").await;
    let wrong = format!("pmw_{}", "0".repeat(64));
    for (auth, what) in [
        (None, "missing header"),
        (Some(format!("Bearer {wrong}")), "unknown key"),
        (Some(format!("Basic {key}")), "wrong scheme"),
        (Some("Bearer".to_string()), "no key"),
        (Some(format!("Bearer {}", &key[4..])), "no prefix"),
        (Some(format!("Bearer {}x", key)), "altered key"),
        (Some(format!("Bearer pmw_{}", "a".repeat(500))), "huge key"),
    ] {
        let mut req = api.http.get(format!("{}/v1/me", api.base));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = pmw_testkit::Resp::read(req.send().await.unwrap()).await;
        assert_eq!(r.status.as_u16(), 401, "{what}: {}", r.text);
        assert_eq!(r.code(), "unauthorized", "{what}");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
    }
    // A disabled account's keys stop working.
    let c = api.db.pg.get().await.unwrap();
    c.execute("UPDATE accounts SET disabled_ms = 1", &[])
        .await
        .unwrap();
    api.get("/v1/me", &key)
        .await
        .expect(401, Some("unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_is_per_key_with_retry_after() {
    let api = Api::start_with(ApiConfig {
        api_rate_per_sec: 1,
        api_rate_burst: 3,
        ..test_config()
    })
    .await;
    let (_, a) = api.account("free").await;
    let (_, b) = api.account("free").await;
    for _ in 0..3 {
        api.get("/v1/me", &a).await.expect(200, None);
    }
    let limited = api.get("/v1/me", &a).await;
    limited.expect(429, Some("rate_limited"));
    let retry: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    // Another key is not affected.
    api.get("/v1/me", &b).await.expect(200, None);
    // After the advertised delay the key works again.
    tokio::time::sleep(std::time::Duration::from_secs(retry)).await;
    api.get("/v1/me", &a).await.expect(200, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_tickets_are_hashed_single_use_and_plan_limited() {
    let api = Api::start().await;
    let (id, key) = api.account("free").await; // free: 2 WebSocket sessions
    let t = api
        .call(Method::POST, "/v1/ws-ticket", Some(&key), None)
        .await;
    t.expect(201, None);
    let ticket = t.body["ticket"].as_str().unwrap().to_string();
    assert!(ticket.starts_with("pmwt_"));
    assert_eq!(t.body["ws_path"], format!("/v1/ws?ticket={ticket}"));
    let expires = t.body["expires_ms"].as_i64().unwrap();
    let ttl = expires - pmw_core::UnixMs::now().0;
    assert!((50_000..=60_000).contains(&ttl), "ttl {ttl}");
    // Stored hashed only.
    let c = api.db.pg.get().await.unwrap();
    let hash: Vec<u8> = c
        .query_one("SELECT ticket_hash FROM ws_tickets", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hash, pmw_core::auth::hash_secret(&ticket));
    // Push redeems it once.
    let p = pmw_core::auth::redeem_ticket(&api.db.pg, &ticket)
        .await
        .unwrap();
    assert_eq!(p.account_id, id);
    assert!(pmw_core::auth::redeem_ticket(&api.db.pg, &ticket)
        .await
        .is_err());
    // Plan limit: at most 2 unused tickets at once (the redeemed one no longer counts).
    api.call(Method::POST, "/v1/ws-ticket", Some(&key), None)
        .await
        .expect(201, None);
    api.call(Method::POST, "/v1/ws-ticket", Some(&key), None)
        .await
        .expect(201, None);
    let refused = api
        .call(Method::POST, "/v1/ws-ticket", Some(&key), None)
        .await;
    refused.expect(403, Some("plan_limit"));
    assert_eq!(
        api.count("SELECT count(*) FROM ws_tickets").await,
        2,
        "nothing stored on refusal"
    );
}
