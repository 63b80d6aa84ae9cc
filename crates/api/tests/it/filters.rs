//! Filters through the API: accepted on subscriptions (single, bulk, PATCH) and webhook endpoints
//! (create, PATCH), stored canonical, shown in every read, refused with 422 `invalid_filter` (one
//! error per entry in bulk) without storing anything; every change bumps `subs_version`; and
//! `GET /v1/trades` and webhook replay list what push would send.

use crate::common::{set_push_cursor, set_watermark, trade_row, wallet, Api};
use reqwest::Method;
use serde_json::{json, Value};

const COND: &str = "0xAB00000000000000000000000000000000000000000000000000000000000001";

async fn patch(api: &Api, path: &str, key: &str, body: Value) -> pmw_testkit::Resp {
    api.call(Method::PATCH, path, Some(key), Some(body)).await
}

async fn version(api: &Api) -> i64 {
    api.count("SELECT seq FROM subs_version WHERE id = 1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_filters_are_validated_stored_canonical_and_bump_the_version() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let w = wallet(1);
    let v0 = version(&api).await;
    let r = api
        .post(
            "/v1/subscriptions",
            &key,
            json!({"wallet": w, "filter": {"side": "BUY", "min_collateral": "012.50", "markets": [COND, "0042", "42"]}}),
        )
        .await;
    r.expect(201, None);
    let canonical =
        json!({"side": "BUY", "min_collateral": "12.5", "markets": [COND.to_lowercase(), "42"]});
    assert_eq!(r.body["filter"], canonical);
    assert!(version(&api).await > v0);
    let list = api.get("/v1/subscriptions", &key).await;
    assert_eq!(list.body["subscriptions"][0]["filter"], canonical);
    let stored: Value = serde_json::from_str(
        &api.db
            .pg
            .get()
            .await
            .unwrap()
            .query_one("SELECT filter::text FROM subscriptions", &[])
            .await
            .unwrap()
            .get::<_, String>(0),
    )
    .unwrap();
    assert_eq!(stored, canonical);

    // Invalid filters: 422 invalid_filter, nothing stored.
    for bad in [
        json!({"side": "buy"}),
        json!({"min_shares": "1.0000001"}),
        json!({"min_shares": "-1"}),
        json!({"min_collateral": "1e3"}),
        json!({"markets": []}),
        json!({"markets": ["0x12"]}),
    ] {
        api.post(
            "/v1/subscriptions",
            &key,
            json!({"wallet": wallet(2), "filter": bad}),
        )
        .await
        .expect(422, Some("invalid_filter"));
    }
    // Not a string, or an unknown field: the body is not a valid request.
    for bad in [json!({"min_shares": 5}), json!({"sides": "BUY"})] {
        let r = api
            .post(
                "/v1/subscriptions",
                &key,
                json!({"wallet": wallet(2), "filter": bad}),
            )
            .await;
        assert_eq!(r.status.as_u16(), 422, "{bad}: {}", r.body);
    }
    assert_eq!(api.count("SELECT count(*) FROM subscriptions").await, 1);

    // PATCH: the filter changes (label kept), bumps the version; null removes it.
    let path = format!("/v1/subscriptions/{w}");
    let v1 = version(&api).await;
    let r = patch(
        &api,
        &path,
        &key,
        json!({"filter": {"side": "SELL", "min_shares": "0.000001"}}),
    )
    .await;
    r.expect(200, None);
    assert_eq!(
        r.body["filter"],
        json!({"side": "SELL", "min_shares": "0.000001"})
    );
    assert!(version(&api).await > v1);
    let r = patch(&api, &path, &key, json!({"label": "x"})).await;
    assert_eq!(r.body["filter"]["side"], "SELL", "absent: unchanged");
    assert_eq!(r.body["label"], "x");
    patch(&api, &path, &key, json!({"filter": {"side": "NONE"}}))
        .await
        .expect(422, Some("invalid_filter"));
    let r = patch(&api, &path, &key, json!({"filter": null})).await;
    r.expect(200, None);
    assert_eq!(r.body["filter"], Value::Null);
    assert_eq!(r.body["label"], "x");
    // `{}` changes nothing; a body that is not an object is refused.
    let r = patch(&api, &path, &key, json!({})).await;
    r.expect(200, None);
    assert_eq!(r.body["label"], "x");
    patch(&api, &path, &key, json!([null, null]))
        .await
        .expect(422, Some("invalid_body"));
    patch(
        &api,
        &format!("/v1/subscriptions/{}", wallet(9)),
        &key,
        json!({"filter": {}}),
    )
    .await
    .expect(404, Some("not_found"));

    // Bulk: an invalid filter refuses the call with one error for its entry.
    let r = api
        .post(
            "/v1/subscriptions/bulk",
            &key,
            json!({"follow": [{"wallet": wallet(3), "filter": {"side": "BUY"}}, {"wallet": wallet(4), "filter": {"min_shares": "x"}}]}),
        )
        .await;
    r.expect(422, Some("invalid_entries"));
    assert_eq!(r.body["errors"][0]["code"], "invalid_filter");
    assert_eq!(r.body["errors"][0]["index"], 1);
    assert_eq!(api.count("SELECT count(*) FROM subscriptions").await, 1);
    let r = api
        .post(
            "/v1/subscriptions/bulk",
            &key,
            json!({"follow": [{"wallet": wallet(3), "filter": {"side": "BUY"}}, {"wallet": wallet(4)}]}),
        )
        .await;
    r.expect(200, None);
    assert_eq!(r.body["followed"][0]["filter"], json!({"side": "BUY"}));
    assert_eq!(r.body["followed"][1]["filter"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_filters_are_validated_shown_and_patched_apart_from_enabled() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let r = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://example.com/h", "filter": {"min_shares": "100"}}),
        )
        .await;
    r.expect(201, None);
    assert_eq!(r.body["filter"], json!({"min_shares": "100"}));
    let ep = r.body["id"].as_i64().unwrap();
    let path = format!("/v1/webhooks/{ep}");
    api.post(
        "/v1/webhooks",
        &key,
        json!({"url": "https://example.com/h", "filter": {"markets": ["abc"]}}),
    )
    .await
    .expect(422, Some("invalid_filter"));
    let v = version(&api).await;
    let r = patch(&api, &path, &key, json!({"enabled": false})).await;
    r.expect(200, None);
    assert_eq!(r.body["filter"], json!({"min_shares": "100"}), "unchanged");
    assert_eq!(r.body["enabled"], false);
    let r = patch(&api, &path, &key, json!({"filter": {"side": "SELL"}})).await;
    r.expect(200, None);
    assert_eq!(r.body["enabled"], false, "unchanged");
    assert_eq!(r.body["disabled_reason"], "disabled by the account");
    assert_eq!(r.body["filter"], json!({"side": "SELL"}));
    assert!(version(&api).await > v);
    let one = api.get(&path, &key).await;
    assert_eq!(one.body["filter"], json!({"side": "SELL"}));
    let list = api.get("/v1/webhooks", &key).await;
    assert_eq!(list.body["endpoints"][0]["filter"], json!({"side": "SELL"}));
    let r = patch(&api, &path, &key, json!({"enabled": true, "filter": {}})).await;
    assert_eq!(r.body["filter"], Value::Null);
    assert_eq!(r.body["enabled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trades_and_replay_list_what_push_would_send() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let (a, b) = (wallet(0xa1), wallet(0xb2));
    // a: SELLs only; b: everything. trade_row's side alternates with the log index (odd: SELL).
    api.post(
        "/v1/subscriptions",
        &key,
        json!({"wallet": a, "filter": {"side": "SELL"}}),
    )
    .await
    .expect(201, None);
    api.post("/v1/subscriptions", &key, json!({"wallet": b}))
        .await
        .expect(201, None);
    let mut rows = Vec::new();
    for block in 1..=4u64 {
        for log in 0..4u32 {
            let mut r = trade_row(block, log, if log < 2 { &a } else { &b });
            if log == 3 {
                r.shares = "1000".into();
            }
            rows.push(r);
        }
    }
    pmw_testkit::rows::plant(&api.db.connect().await, &rows).await;
    set_watermark(&api.db, 4).await;
    set_push_cursor(&api.db, 4, 999_999).await;
    let cursors = |v: &Value, field: &str| -> Vec<String> {
        v[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["cursor"].as_str().unwrap().to_string())
            .collect()
    };
    let expect: Vec<String> = (1..=4)
        .flat_map(|b| [1, 2, 3].map(|l| format!("{b:012}-{l:06}")))
        .collect();
    let page = api.get("/v1/trades?limit=1000", &key).await;
    page.expect(200, None);
    assert_eq!(
        cursors(&page.body, "trades"),
        expect,
        "a's BUYs filtered out"
    );
    let all = api.get("/v1/trades?limit=1000&unfiltered=true", &key).await;
    assert_eq!(all.body["trades"].as_array().unwrap().len(), 16);
    // A short page: 4 read, 3 returned, `next` past the one filtered out.
    let page = api.get("/v1/trades?limit=4", &key).await;
    assert_eq!(cursors(&page.body, "trades").len(), 3);
    assert_eq!(page.body["next"], "000000000001-000003");
    assert_eq!(page.body["more"], true);

    // Replay to an endpoint that takes at least 100 shares: only the log-3 trades of b.
    let ep = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://example.com/h", "filter": {"min_shares": "100"}}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let r = api
        .post(
            &format!("/v1/webhooks/{ep}/replay"),
            &key,
            json!({"after": "000000000000-000000"}),
        )
        .await;
    r.expect(202, None);
    assert_eq!(r.body["trades"], 4);
    assert_eq!(r.body["enqueued"], 4);
    let logs: Vec<i32> = api
        .db
        .pg
        .get()
        .await
        .unwrap()
        .query("SELECT log_index FROM webhook_deliveries", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logs, vec![3; 4]);
}
