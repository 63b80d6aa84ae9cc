//! pmw-api's webhook endpoints with push's dispatcher delivering: disabling expires pending
//! deliveries (a re-enable sends only new ones); an endpoint the dispatcher disabled for failing
//! shows why through the API, in the endpoint and in its delivery log.

use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::Cursor;
use pmw_push::webhook::{self, DeliveryKind, Dispatcher, NewDelivery, WebhookConfig};
use pmw_testkit::eventually;
use pmw_testkit::hooks::{Receiver, Step};
use reqwest::Method;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api::{test_config, Api};

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
                payload: json!({"type": "trade", "cursor": cursor}).to_string(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_expires_pending_deliveries_and_reenabling_sends_only_new_ones() {
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let (api, key, ep) = with_endpoint(&rx.url()).await;
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
        rx.hits().iter().map(|h| h.id.clone()).collect::<Vec<_>>(),
        new,
        "only the new delivery reached the receiver"
    );
    for id in &old {
        assert_eq!(delivery(&api, id).await.0, "failed", "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_failing_for_the_period_shows_disabled_with_its_reason() {
    let rx = Receiver::start(vec![Step::status(500)]).await;
    let (api, key, ep) = with_endpoint(&rx.url()).await;
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
