//! Issue 30, item 9: no secret at rest. Webhook signing secrets are stored sealed with the
//! operator key (`PMW_SECRET_KEYS`, `pmw_core::sealed`) and still sign what the official
//! `standardwebhooks` library verifies; responses kept for `Idempotency-Key` replays hold no
//! API key, `whsec_` secret or ticket (a replay shows the resource without its secret). Proven
//! by reading the tables directly.

use pmw_api::ApiConfig;
use pmw_core::sealed::{self, Keyring};
use pmw_testkit::hooks::{python_signature_of, Receiver, Step};
use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{test_config, Api};

async fn post_once(api: &Api, path: &str, key: &str, body: Value, idem: &str) -> [Value; 2] {
    let mut out = Vec::new();
    for _ in 0..2 {
        let req = api
            .http
            .request(Method::POST, format!("{}{path}", api.base))
            .bearer_auth(key)
            .header("idempotency-key", idem)
            .json(&body);
        let r = pmw_testkit::Resp::read(req.send().await.unwrap()).await;
        assert!(r.status.is_success(), "{path}: {}", r.text);
        out.push(r.body);
    }
    [out.remove(0), out.remove(0)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_is_stored_in_plain_text_and_sealed_secrets_still_sign() {
    // Two keys, as during a rotation: the first seals. Set before anything reads them.
    let keys = format!(
        "{},{}",
        Keyring::generate_entry("new"),
        Keyring::generate_entry("old")
    );
    std::env::set_var(sealed::ENV, &keys);
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let hook = Receiver::start(vec![Step::status(204)]).await;

    let [made, again] = post_once(&api, "/v1/keys", &key, json!({}), "k-1").await;
    let new_key = made["key"].as_str().unwrap().to_string();
    assert!(new_key.starts_with("pmw_"));
    assert!(again.get("key").is_none(), "a replay shows no key: {again}");
    assert_eq!(again["prefix"], made["prefix"]);

    let [ep, ep_again] = post_once(
        &api,
        "/v1/webhooks",
        &key,
        json!({"url": hook.url()}),
        "e-1",
    )
    .await;
    assert!(ep["secret"].as_str().unwrap().starts_with("whsec_"));
    assert!(ep_again.get("secret").is_none(), "{ep_again}");
    assert_eq!(ep_again["id"], ep["id"]);
    let id = ep["id"].as_i64().unwrap();
    let rotate = format!("/v1/webhooks/{id}/rotate-secret");
    let [rotated, _] = post_once(&api, &rotate, &key, json!({"overlap_secs": 0}), "r-1").await;
    let secret = rotated["secret"].as_str().unwrap().to_string();

    let [ticket, ticket_again] = post_once(&api, "/v1/ws-ticket", &key, json!(null), "t-1").await;
    let ticket = ticket["ticket"].as_str().unwrap().to_string();
    assert!(ticket_again.get("ticket").is_none() && ticket_again.get("ws_path").is_none());

    // The tables, read directly.
    let c = api.db.pg.get().await.unwrap();
    for r in c
        .query("SELECT secret, previous_secret FROM webhook_endpoints", &[])
        .await
        .unwrap()
    {
        let current: String = r.get(0);
        assert!(
            current.starts_with("pmwsealed:v2:new:") && !current.contains("whsec_"),
            "{current}"
        );
        if let Some(p) = r.get::<_, Option<String>>(1) {
            assert!(
                p.starts_with("pmwsealed:v2:") && !p.contains("whsec_"),
                "{p}"
            );
        }
    }
    let stored: Vec<String> = pmw_testkit::column(
        &c,
        "SELECT convert_from(body, 'UTF8') FROM idempotency_keys",
    )
    .await;
    assert_eq!(stored.len(), 4, "{stored:?}");
    for body in &stored {
        for secret in [
            new_key.as_str(),
            secret.as_str(),
            ticket.as_str(),
            "whsec_",
            "pmwt_",
        ] {
            assert!(!body.contains(secret), "{secret:?} stored in {body}");
        }
    }

    // The sealed secret signs: the test event verifies with the official library.
    let r = api
        .post(&format!("/v1/webhooks/{id}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert_eq!(r.body["delivered"], true, "{}", r.text);
    let hit = &hook.hits()[0];
    let expected = python_signature_of(&secret, hit).await;
    assert_eq!(hit.signature, expected, "signed with the sealed secret");
}

/// Issue 42 item 5: a sealed secret is bound to its endpoint. Copied into another endpoint's
/// row (a database write by someone who cannot read the keys), it does not open there: that
/// endpoint cannot sign (its test event is refused), while the original still signs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_secret_copied_to_another_endpoint_does_not_open() {
    std::env::set_var(sealed::ENV, Keyring::generate_entry("k"));
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let hook = Receiver::start(vec![Step::status(204)]).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = api
            .post("/v1/webhooks", &key, json!({"url": hook.url()}))
            .await;
        r.expect(201, None);
        ids.push(r.body["id"].as_i64().unwrap());
    }
    let (mine, other) = (ids[0], ids[1]);
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE id = $1) WHERE id = $2",
        &[&mine, &other],
    )
    .await
    .unwrap();
    let (path_of_mine, path_of_other) = (
        format!("/v1/webhooks/{mine}/test"),
        format!("/v1/webhooks/{other}/test"),
    );
    let copied = api.post(&path_of_other, &key, json!(null)).await;
    assert!(
        copied.status.as_u16() >= 500 && copied.body["delivered"] != true,
        "the copied secret signed for another endpoint: {}",
        copied.text
    );
    let original = api.post(&path_of_mine, &key, json!(null)).await;
    original.expect(200, None);
    assert_eq!(original.body["delivered"], true, "{}", original.text);
    assert_eq!(
        hook.hits().len(),
        1,
        "only the original endpoint's event was sent"
    );
}

/// Issue 42 item 5: without `PMW_SECRET_KEYS`, `/v1/ready` carries a warning (not gating).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_warns_when_secret_keys_are_unset() {
    std::env::remove_var(sealed::ENV);
    let api = Api::start_with(ApiConfig {
        api_ready_interval_ms: 100,
        ..test_config()
    })
    .await;
    let r = api
        .call(reqwest::Method::GET, "/v1/ready", None, None)
        .await;
    let warnings = r.body["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings
            .iter()
            .filter_map(|w| w.as_str())
            .any(|w| w.starts_with("PMW_SECRET_KEYS is unset")),
        "{}",
        r.text
    );
}
