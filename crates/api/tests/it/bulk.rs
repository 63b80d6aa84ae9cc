//! Bulk follow/unfollow (all-or-nothing, per-entry errors, plan limit) and `Idempotency-Key` on
//! POSTs (same request → the stored response, another request → 422, transient answers not
//! stored, keys per account, expired keys purged).

use pmw_testkit::Resp;
use serde_json::{json, Value};

use crate::common::{wallet, Api};

const COUNT: &str = "SELECT count(*) FROM subscriptions";

async fn post_key(api: &Api, path: &str, key: &str, idem: &str, body: Value) -> Resp {
    let r = api
        .http
        .post(format!("{}{path}", api.base))
        .bearer_auth(key)
        .header("idempotency-key", idem)
        .json(&body)
        .send()
        .await
        .unwrap();
    Resp::read(r).await
}

#[tokio::test]
async fn bulk_follow_and_unfollow_all_or_nothing() {
    let api = Api::start().await;
    let (_, key) = api.account("free").await; // 10 wallets
    api.post("/v1/subscriptions", &key, json!({"wallet": wallet(1)}))
        .await
        .expect(201, None);

    let follow: Vec<Value> = (2..=5)
        .map(|i| json!({"wallet": wallet(i), "label": format!("w{i}")}))
        .chain([json!({"wallet": wallet(1)})])
        .collect();
    let r = api
        .post("/v1/subscriptions/bulk", &key, json!({"follow": follow}))
        .await;
    r.expect(200, None);
    assert_eq!(
        r.body["followed"].as_array().unwrap().len(),
        4,
        "{}",
        r.text
    );
    assert_eq!(r.body["already_followed"][0]["wallet"], wallet(1));
    assert_eq!(
        (r.body["total"].as_i64(), r.body["limit"].as_i64()),
        (Some(5), Some(10))
    );
    assert_eq!(api.count(COUNT).await, 5);

    // Any bad entry refuses the whole call, one error per entry, nothing changes.
    let r = api
        .post(
            "/v1/subscriptions/bulk",
            &key,
            json!({
                "follow": [{"wallet": wallet(6)}, {"wallet": "0x12"}, {"wallet": wallet(6)}],
                "unfollow": [wallet(2), wallet(9)]
            }),
        )
        .await;
    r.expect(422, Some("invalid_entries"));
    let errs: Vec<(String, u64, String)> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["list"].as_str().unwrap().into(),
                e["index"].as_u64().unwrap(),
                e["code"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        errs,
        [
            ("follow".into(), 1, "invalid_address".into()),
            ("follow".into(), 2, "duplicate".into()),
            ("unfollow".into(), 1, "not_followed".into()),
        ],
        "{}",
        r.text
    );
    assert_eq!(api.count(COUNT).await, 5);

    // Over the plan's limit: 403 naming the wallets beyond it, nothing changes.
    let follow: Vec<Value> = (6..=11).map(|i| json!({"wallet": wallet(i)})).collect();
    let r = api
        .post("/v1/subscriptions/bulk", &key, json!({"follow": follow}))
        .await;
    r.expect(403, Some("plan_limit"));
    assert_eq!(r.body["errors"].as_array().unwrap().len(), 1, "{}", r.text);
    assert_eq!(r.body["errors"][0]["wallet"], wallet(11));
    assert_eq!(api.count(COUNT).await, 5);

    // Unfollowing in the same call makes room: applied together.
    let r = api
        .post(
            "/v1/subscriptions/bulk",
            &key,
            json!({"follow": follow, "unfollow": [wallet(1), wallet(2)]}),
        )
        .await;
    r.expect(200, None);
    assert_eq!(r.body["total"], 9);
    assert_eq!(r.body["unfollowed"], json!([wallet(1), wallet(2)]));
    assert_eq!(api.count(COUNT).await, 9);

    // More entries than the plan's limit in one call.
    let many: Vec<String> = (20..31).map(wallet).collect();
    api.post("/v1/subscriptions/bulk", &key, json!({"unfollow": many}))
        .await
        .expect(422, Some("too_many_entries"));
}

#[tokio::test]
async fn idempotency_key_replays_refuses_reuse_and_expires() {
    let api = Api::start().await;
    let (account, key) = api.account("pro").await;
    let (_, other) = api.account("pro").await;

    // Same key, same request: the stored response again, the subscription made once.
    let body = json!({"wallet": wallet(1), "label": "a"});
    let first = post_key(&api, "/v1/subscriptions", &key, "k-1", body.clone()).await;
    first.expect(201, None);
    let again = post_key(&api, "/v1/subscriptions", &key, "k-1", body.clone()).await;
    again.expect(201, None);
    assert_eq!(again.text, first.text);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert!(first.headers.get("idempotent-replayed").is_none());
    // Without the key the same body is a plain retry: 200 already followed.
    api.post("/v1/subscriptions", &key, body.clone())
        .await
        .expect(200, None);

    // Same key, different body or path: 422, nothing runs.
    post_key(
        &api,
        "/v1/subscriptions",
        &key,
        "k-1",
        json!({"wallet": wallet(2)}),
    )
    .await
    .expect(422, Some("idempotency_key_reused"));
    post_key(&api, "/v1/keys", &key, "k-1", body.clone())
        .await
        .expect(422, Some("idempotency_key_reused"));
    assert_eq!(api.count(COUNT).await, 1);

    // Keys are per account.
    post_key(
        &api,
        "/v1/subscriptions",
        &other,
        "k-1",
        json!({"wallet": wallet(2)}),
    )
    .await
    .expect(201, None);

    // A retry never makes a second key, and never shows the secret again (no secret is stored
    // for replays: issue 30): the same key by its prefix.
    let k1 = post_key(&api, "/v1/keys", &key, "k-2", json!({"label": "ci"})).await;
    k1.expect(201, None);
    let k2 = post_key(&api, "/v1/keys", &key, "k-2", json!({"label": "ci"})).await;
    k2.expect(201, None);
    assert!(k2.body.get("key").is_none(), "{}", k2.text);
    assert_eq!(k2.body["prefix"], k1.body["prefix"]);
    let keys = api
        .count(&format!(
            "SELECT count(*) FROM api_keys WHERE account_id = {account}"
        ))
        .await;
    assert_eq!(keys, 2);

    // A refusal is the request's answer too: stored and replayed.
    let bad = json!({"wallet": "0x12"});
    post_key(&api, "/v1/subscriptions", &key, "k-3", bad.clone())
        .await
        .expect(422, Some("invalid_address"));
    let r = post_key(&api, "/v1/subscriptions", &key, "k-3", bad).await;
    r.expect(422, Some("invalid_address"));
    assert_eq!(r.headers["idempotent-replayed"], "true");

    // A 401 is not stored (and the key not claimed).
    post_key(&api, "/v1/subscriptions", "pmw_nope", "k-4", body.clone())
        .await
        .expect(401, None);
    assert_eq!(
        api.count("SELECT count(*) FROM idempotency_keys WHERE key = 'k-4'")
            .await,
        0
    );

    // Malformed keys: 400.
    for k in ["", &"x".repeat(256), "a b"] {
        post_key(&api, "/v1/subscriptions", &key, k, body.clone())
            .await
            .expect(400, Some("invalid_idempotency_key"));
    }

    // An in-flight first request: 409 for the retry.
    let c = api.db.pg.get().await.unwrap();
    let now = pmw_core::UnixMs::now().0;
    let fp = vec![0u8; 32];
    c.execute(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, created_ms, expires_ms) \
         VALUES ($1, 'k-5', $2, $3, $4)",
        &[&account, &fp, &now, &(now + 60_000)],
    )
    .await
    .unwrap();
    // (its fingerprint differs: a different request is refused even while in flight)
    post_key(&api, "/v1/subscriptions", &key, "k-5", body.clone())
        .await
        .expect(422, Some("idempotency_key_reused"));

    // Expired keys are reusable and purged when a new key is stored.
    c.execute(
        "UPDATE idempotency_keys SET expires_ms = 1 WHERE key IN ('k-1', 'k-2')",
        &[],
    )
    .await
    .unwrap();
    post_key(
        &api,
        "/v1/subscriptions",
        &key,
        "k-1",
        json!({"wallet": wallet(3)}),
    )
    .await
    .expect(201, None);
    assert_eq!(
        api.count("SELECT count(*) FROM idempotency_keys WHERE expires_ms <= 1")
            .await,
        0,
        "expired keys are purged"
    );
}

#[tokio::test]
async fn idempotency_in_flight_retry_is_409() {
    let api = Api::start().await;
    let (account, key) = api.account("pro").await;
    let body = json!({"wallet": wallet(1)});
    // The fingerprint of exactly this request, claimed but unfinished.
    let mut h = <sha2::Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut h, b"POST\n/v1/subscriptions\n");
    sha2::Digest::update(&mut h, serde_json::to_vec(&body).unwrap());
    let fp = sha2::Digest::finalize(h).to_vec();
    let now = pmw_core::UnixMs::now().0;
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, created_ms, expires_ms) \
         VALUES ($1, 'k', $2, $3, $4)",
        &[&account, &fp, &now, &(now + 60_000)],
    )
    .await
    .unwrap();
    post_key(&api, "/v1/subscriptions", &key, "k", body.clone())
        .await
        .expect(409, Some("idempotency_in_flight"));
    // A first request dead for longer than the in-flight window: the key is claimed again.
    c.execute(
        "UPDATE idempotency_keys SET created_ms = created_ms - 120000",
        &[],
    )
    .await
    .unwrap();
    post_key(&api, "/v1/subscriptions", &key, "k", body)
        .await
        .expect(201, None);
}
