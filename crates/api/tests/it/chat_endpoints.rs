//! Chat endpoints through the API (issue 45, item 2): created, listed and changed with their
//! kind; a destination of the wrong shape is a 422 that says what is wrong; the Discord/Slack
//! URL's path and the Telegram bot token are sealed at rest and never in a response.

use pmw_api::ApiConfig;
use pmw_core::sealed::{self, Keyring};
use reqwest::Method;
use serde_json::json;

use crate::common::{test_config, Api};

const DISCORD_PATH: &str = "/api/webhooks/123456789/SECRETdiscordPATH_abc";
const SLACK_PATH: &str = "/services/T0SECRET/B0SECRET/SECRETslackPATHxyz";
const TOKEN: &str = "987654:SECRETtelegramTOKEN_abcdefghij";
const SECRETS: [&str; 4] = [
    "SECRETdiscordPATH",
    "SECRETslackPATH",
    "SECRETtelegramTOKEN",
    "SECRETnewPATH",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_endpoints_are_checked_sealed_and_never_shown() {
    std::env::set_var(sealed::ENV, Keyring::generate_entry("k1"));
    let api = Api::start_with(ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let base = "http://127.0.0.1:9";
    let mut shown = Vec::new();

    // Refused, each with its reason.
    for (body, code) in [
        (
            json!({"kind": "discord", "url": format!("{base}/hooks/x")}),
            "invalid_destination",
        ),
        (json!({"kind": "discord"}), "invalid_destination"),
        (
            json!({"kind": "slack", "url": format!("{base}/services/x")}),
            "invalid_destination",
        ),
        (
            json!({"kind": "telegram", "bot_token": TOKEN}),
            "invalid_destination",
        ),
        (
            json!({"kind": "telegram", "bot_token": "nope", "chat_id": "1"}),
            "invalid_destination",
        ),
        (
            json!({"url": format!("{base}/h"), "bot_token": TOKEN}),
            "invalid_destination",
        ),
        (
            json!({"kind": "discord", "url": format!("{base}{DISCORD_PATH}"), "events": ["final"]}),
            "invalid_events",
        ),
    ] {
        let r = api.post("/v1/webhooks", &key, body.clone()).await;
        assert_eq!(r.status.as_u16(), 422, "{body}: {}", r.text);
        assert_eq!(r.code(), code, "{body}: {}", r.text);
        shown.push(r.text);
    }
    assert_eq!(api.count("SELECT count(*) FROM webhook_endpoints").await, 0);

    // Created: the kind shown, the URL cut to its host, no secret.
    let d = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"kind": "discord", "url": format!("{base}{DISCORD_PATH}")}),
        )
        .await;
    d.expect(201, None);
    assert_eq!(d.body["kind"], "discord");
    assert_eq!(d.body["url"], base);
    assert!(d.body.get("secret").is_none(), "{}", d.text);
    let s = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"kind": "slack", "url": format!("{base}{SLACK_PATH}")}),
        )
        .await;
    s.expect(201, None);
    let t = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"kind": "telegram", "bot_token": TOKEN, "chat_id": "-1001234567890"}),
        )
        .await;
    t.expect(201, None);
    assert_eq!(t.body["url"], "telegram:-1001234567890");
    let plain = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": format!("{base}/plain")}),
        )
        .await;
    plain.expect(201, None);
    assert_eq!(plain.body["kind"], "webhook");
    assert!(plain.body["secret"].as_str().unwrap().starts_with("whsec_"));
    let id = d.body["id"].as_i64().unwrap();

    // Changed: a new Discord URL of the right shape; a wrong one refused.
    let path = format!("/v1/webhooks/{id}");
    let patch = |body| api.call(Method::PATCH, &path, Some(&key), Some(body));
    let bad = patch(json!({"url": format!("{base}/nope")})).await;
    bad.expect(422, Some("invalid_destination"));
    let moved = patch(json!({"url": format!("{base}/api/webhooks/42/SECRETnewPATH_xyz")})).await;
    moved.expect(200, None);
    assert_eq!(moved.body["kind"], "discord");
    patch(json!({"events": ["trade", "final"]}))
        .await
        .expect(422, Some("invalid_events"));
    api.post(
        &format!("/v1/webhooks/{id}/rotate-secret"),
        &key,
        json!(null),
    )
    .await
    .expect(422, Some("chat_endpoint"));
    api.post(&format!("/v1/webhooks/{id}/test"), &key, json!(null))
        .await
        .expect(422, Some("chat_endpoint"));
    let list = api.get("/v1/webhooks", &key).await;
    list.expect(200, None);
    let kinds: Vec<&str> = list.body["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["discord", "slack", "telegram", "webhook"]);
    let one = api.get(&format!("/v1/webhooks/{id}"), &key).await;
    one.expect(200, None);
    shown.extend([d.text, s.text, t.text, moved.text, list.text, one.text]);
    for text in &shown {
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret} shown in {text}");
        }
    }

    // At rest: sealed, and the destination opens to what was given.
    let c = api.db.pg.get().await.unwrap();
    for r in c
        .query(
            "SELECT id, url, secret FROM webhook_endpoints WHERE kind <> 'webhook'",
            &[],
        )
        .await
        .unwrap()
    {
        let (ep, url, stored): (i64, String, String) = (r.get(0), r.get(1), r.get(2));
        assert!(stored.starts_with("pmwsealed:v2:k1:"), "{stored}");
        for secret in SECRETS {
            assert!(
                !stored.contains(secret) && !url.contains(secret),
                "{secret} at rest"
            );
        }
        let target = pmw_core::chat::ChatTarget::from_stored(&stored, ep).expect("a chat target");
        if ep == id {
            assert!(target
                .url
                .unwrap()
                .ends_with("/api/webhooks/42/SECRETnewPATH_xyz"));
        }
    }
}
