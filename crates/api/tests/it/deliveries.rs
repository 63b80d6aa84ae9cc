//! The delivery log (ClickHouse `delivery_log`, newest first, keyset pages that return every
//! attempt once) and replay (rows in `webhook_deliveries` in the push engine's shape, same
//! `webhook-id`, finished ones queued again, pending ones untouched), and no delivery outliving
//! its endpoint.

use std::collections::BTreeSet;

use crate::common::{set_push_cursor, set_watermark, test_config, trade_row, wallet, Api};
use pmw_core::ch::latency::insert_all;
use pmw_core::ch::DeliveryLogRow;
use pmw_core::webhook::{webhook_id, DeliveryKind};
use pmw_core::Cursor;
use serde_json::json;

fn attempt(endpoint: u64, i: u32, t: i64) -> DeliveryLogRow {
    DeliveryLogRow {
        delivery_id: format!("msg_{i:04}"),
        endpoint_id: endpoint,
        account_id: 1,
        attempt: 1 + i % 3,
        kind: "trade".into(),
        block_number: 100 + u64::from(i),
        log_index: i,
        t_attempt_ms: t,
        duration_ms: 12,
        status_code: if i.is_multiple_of(2) { 200 } else { 500 },
        outcome: if i.is_multiple_of(2) {
            "delivered"
        } else {
            "retry"
        }
        .into(),
        error: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_log_pages_newest_first_each_attempt_once() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let ep = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://example.com/h"}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    // 25 attempts, several sharing a timestamp; 5 of another endpoint.
    let mut rows: Vec<DeliveryLogRow> = (0..25)
        .map(|i| attempt(ep as u64, i, 1_000 + i64::from(i / 3)))
        .collect();
    rows.extend((0..5).map(|i| attempt(ep as u64 + 1, 100 + i, 5_000)));
    insert_all(&api.db.ch, "delivery_log", &rows).await.unwrap();

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = cursor
            .as_ref()
            .map(|c| format!("&cursor={c}"))
            .unwrap_or_default();
        let r = api
            .get(&format!("/v1/webhooks/{ep}/deliveries?limit=10{q}"), &key)
            .await;
        r.expect(200, None);
        pages += 1;
        for a in r.body["attempts"].as_array().unwrap() {
            seen.push((
                a["t_attempt_ms"].as_i64().unwrap(),
                a["delivery_id"].as_str().unwrap().to_string(),
            ));
        }
        match r.body["next"].as_str() {
            Some(n) => cursor = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25, "every attempt once: {seen:?}");
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 25);
    assert!(
        seen.windows(2).all(|w| w[0] > w[1]),
        "newest first: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, id)| id.as_str() < "msg_0100"),
        "only this endpoint's attempts"
    );

    for bad in ["x", "1.2", "a.1.msg", "1.b.msg", "1.1."] {
        api.get(&format!("/v1/webhooks/{ep}/deliveries?cursor={bad}"), &key)
            .await
            .expect(400, Some("invalid_cursor"));
    }
    for limit in ["0", "1001", "1000000"] {
        api.get(&format!("/v1/webhooks/{ep}/deliveries?limit={limit}"), &key)
            .await
            .expect(422, Some("invalid_limit"));
    }
    api.get(&format!("/v1/webhooks/{ep}/deliveries?limit=-1"), &key)
        .await
        .expect(400, Some("invalid_query"));
    api.get(&format!("/v1/webhooks/{ep}/deliveries?page=2"), &key)
        .await
        .expect(400, Some("invalid_query"));
    let (_, other) = api.account("pro").await;
    api.get(&format!("/v1/webhooks/{ep}/deliveries"), &other)
        .await
        .expect(404, Some("not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_enqueues_the_accounts_trades_after_the_cursor() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let mine = wallet(0xaa);
    api.post("/v1/subscriptions", &key, json!({"wallet": mine}))
        .await
        .expect(201, None);
    let ep = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://example.com/h"}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    // Blocks 10..=19: two fills of mine and one of someone else per block.
    let mut rows = Vec::new();
    for b in 10..20 {
        rows.push(trade_row(b, 1, &mine));
        rows.push(trade_row(b, 2, &wallet(0xbb)));
        rows.push(trade_row(b, 3, &mine));
    }
    pmw_testkit::rows::plant(&api.db.connect().await, &rows).await;
    set_watermark(&api.db, 19).await;
    // Push has processed up to block 17: replay stops there (push delivers the rest itself).
    set_push_cursor(&api.db, 17, 999_999).await;

    let r = api
        .post(
            &format!("/v1/webhooks/{ep}/replay"),
            &key,
            json!({"after": "000000000012-000001", "limit": 5}),
        )
        .await;
    r.expect(202, None);
    assert_eq!(r.body["enqueued"], 5);
    assert_eq!(r.body["more"], true);
    let next = r.body["next"].as_str().unwrap().to_string();
    assert_eq!(next, "000000000014-000003");
    let r = api
        .post(
            &format!("/v1/webhooks/{ep}/replay"),
            &key,
            json!({"after": next}),
        )
        .await;
    r.expect(202, None);
    assert_eq!(r.body["enqueued"], 6, "blocks 15..=17, two fills each");
    assert_eq!(r.body["more"], false);

    let c = api.db.pg.get().await.unwrap();
    let stored = c
        .query(
            "SELECT id, endpoint_id, kind, block_number, log_index, payload::jsonb, state, attempts, t_detect_ms \
             FROM webhook_deliveries ORDER BY block_number, log_index",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), 11);
    let first = &stored[0];
    let cur = Cursor {
        block: 12,
        log_index: 3,
    };
    assert_eq!(
        first.get::<_, String>(0),
        webhook_id(cur, &format!("0x{:064x}", 12), ep, DeliveryKind::Trade)
    );
    assert_eq!(first.get::<_, i64>(1), ep);
    assert_eq!(first.get::<_, String>(2), "trade");
    let payload: serde_json::Value = first.get(5);
    assert_eq!(payload["type"], "trade");
    assert_eq!(payload["cursor"], cur.to_string());
    assert_eq!(payload["trade"]["wallet"], mine);
    assert_eq!(first.get::<_, String>(6), "pending");
    assert!(
        stored.iter().all(|r| r.get::<_, i64>(3) <= 17),
        "never past the push cursor"
    );

    // Again: everything is still pending, nothing changes.
    let r = api
        .post(
            &format!("/v1/webhooks/{ep}/replay"),
            &key,
            json!({"after": "000000000012-000001"}),
        )
        .await;
    assert_eq!(r.body["enqueued"], 0);
    // Delivered ones are queued again with the same webhook-id.
    // (As push records them: a delivered row keeps no body, the replay renders it again.)
    c.execute("UPDATE webhook_deliveries SET state = 'delivered', attempts = 1, done_ms = 1, payload = NULL WHERE block_number = 13", &[])
        .await
        .unwrap();
    let r = api
        .post(
            &format!("/v1/webhooks/{ep}/replay"),
            &key,
            json!({"after": "000000000012-000001"}),
        )
        .await;
    assert_eq!(r.body["enqueued"], 2);
    assert_eq!(
        api.count(
            "SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' AND attempts = 0"
        )
        .await,
        11
    );
    for r in c
        .query(
            "SELECT payload::jsonb FROM webhook_deliveries WHERE block_number = 13",
            &[],
        )
        .await
        .unwrap()
    {
        let body: Option<serde_json::Value> = r.get(0);
        let body = body.expect("a requeued delivery has its body back");
        assert_eq!(body["type"], "trade");
        assert!(body["cursor"]
            .as_str()
            .unwrap()
            .starts_with("000000000013-"));
    }

    // Bad input stores nothing.
    let before = api.count("SELECT count(*) FROM webhook_deliveries").await;
    for (body, status, code) in [
        (json!({"after": "nope"}), 400, "invalid_cursor"),
        (
            json!({"after": "000000000012-00000"}),
            400,
            "invalid_cursor",
        ),
        (
            json!({"after": "000000000012-000001", "limit": 0}),
            422,
            "invalid_limit",
        ),
        (
            json!({"after": "000000000012-000001", "limit": 1_000_000}),
            422,
            "invalid_limit",
        ),
        (
            json!({"after": "000000000012-000001", "limit": -5}),
            422,
            "invalid_body",
        ),
        (
            json!({"after": "000000000012-000001", "from": 1}),
            422,
            "invalid_body",
        ),
        (json!({}), 422, "invalid_body"),
    ] {
        api.post(&format!("/v1/webhooks/{ep}/replay"), &key, body)
            .await
            .expect(status, Some(code));
    }
    // A disabled endpoint is not replayed to.
    api.call(
        reqwest::Method::PATCH,
        &format!("/v1/webhooks/{ep}"),
        Some(&key),
        Some(json!({"enabled": false})),
    )
    .await
    .expect(200, None);
    c.execute("UPDATE webhook_deliveries SET state = 'delivered'", &[])
        .await
        .unwrap();
    api.post(
        &format!("/v1/webhooks/{ep}/replay"),
        &key,
        json!({"after": "000000000000-000000"}),
    )
    .await
    .expect(409, Some("endpoint_disabled"));
    assert_eq!(
        api.count("SELECT count(*) FROM webhook_deliveries").await,
        before
    );
    assert_eq!(
        api.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'")
            .await,
        0
    );
}

/// A chat endpoint's log names the message that carried each delivery: the deliveries one
/// digest carried share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_log_names_the_chat_message_that_carried_each_delivery() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let ep = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"kind": "discord", "url": "https://discord.com/api/webhooks/1/secretsecret"}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let rows: Vec<DeliveryLogRow> = (0..3).map(|i| attempt(ep as u64, i * 2, 1_000)).collect();
    insert_all(&api.db.ch, "delivery_log", &rows).await.unwrap();
    let c = api.db.pg.get().await.unwrap();
    for (r, message) in rows.iter().zip(["chat_a", "chat_a", "chat_b"]) {
        c.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, \
             state, attempts, next_attempt_ms, t_detect_ms, created_ms, message_id) \
             VALUES ($1, $2, 'trade', $3, $4, '{}', 'delivered', 1, 0, 0, 0, $5)",
            &[&r.delivery_id, &ep, &(r.block_number as i64), &(r.log_index as i32), &message],
        )
        .await
        .unwrap();
    }
    let r = api
        .get(&format!("/v1/webhooks/{ep}/deliveries"), &key)
        .await;
    r.expect(200, None);
    let carried: BTreeSet<(String, String)> = r.body["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["message_id"].as_str().unwrap().to_string(),
                a["delivery_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [("chat_a", 0), ("chat_a", 2), ("chat_b", 4)]
        .into_iter()
        .map(|(m, i)| (m.to_string(), format!("msg_{i:04}")))
        .collect();
    assert_eq!(carried, want);
}

/// Deliveries of `endpoint` at blocks `blocks`, as a round or a replay queues them.
fn owed(endpoint: i64, blocks: std::ops::Range<u64>) -> Vec<pmw_core::pg::deliveries::NewDelivery> {
    blocks
        .map(|b| {
            let cursor = Cursor {
                block: b,
                log_index: 0,
            };
            pmw_core::pg::deliveries::NewDelivery {
                id: webhook_id(
                    cursor,
                    &format!("0x{b:064x}"),
                    endpoint,
                    DeliveryKind::Trade,
                ),
                endpoint_id: endpoint,
                kind: pmw_core::message::Kind::Trade,
                cursor,
                payload: "{}".into(),
                t_detect_ms: 0,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_endpoint_leaves_no_delivery_even_one_queued_while_it_was_deleted() {
    let api = Api::start_with(pmw_api::ApiConfig {
        api_allow_private_webhooks: true,
        ..test_config()
    })
    .await;
    let (account, key) = api.account("pro").await;
    let mut eps = Vec::new();
    for _ in 0..2 {
        let r = api
            .post("/v1/webhooks", &key, json!({"url": "http://127.0.0.1:9/h"}))
            .await;
        r.expect(201, None);
        eps.push(r.body["id"].as_i64().unwrap());
    }
    let count =
        |ep: i64| format!("SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = {ep}");
    // An enqueue (the production statement) holds both endpoints while the API deletes the first.
    let mut c = api.db.connect().await;
    let tx = c.transaction().await.unwrap();
    let mut items = owed(eps[0], 10..13);
    items.extend(owed(eps[1], 10..12));
    let queued =
        pmw_core::pg::deliveries::enqueue(&tx, pmw_core::pg::deliveries::Writer::Replay, &items)
            .await
            .unwrap();
    assert_eq!(queued.inserted, 5);
    let delete = {
        let web = pmw_testkit::Http {
            base: api.web.base.clone(),
            http: api.web.http.clone(),
        };
        let (key, ep) = (key.clone(), eps[0]);
        tokio::spawn(async move { web.delete(&format!("/v1/webhooks/{ep}"), &key).await })
    };
    // The delete waits for the enqueue's lock on its endpoint, then sees what it committed.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    tx.commit().await.unwrap();
    delete.await.unwrap().expect(204, None);
    assert_eq!(
        api.count(&count(eps[0])).await,
        0,
        "the deleted endpoint's deliveries are gone"
    );
    assert_eq!(
        api.count(&count(eps[1])).await,
        2,
        "another endpoint's are kept"
    );
    // An enqueue after the delete queues nothing for it.
    let tx = c.transaction().await.unwrap();
    let late = pmw_core::pg::deliveries::enqueue(
        &tx,
        pmw_core::pg::deliveries::Writer::Replay,
        &owed(eps[0], 20..22),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(late.inserted, 0);
    assert_eq!(api.count(&count(eps[0])).await, 0);
    // An account's delete cascades to its endpoints, and so to their deliveries.
    c.execute("DELETE FROM accounts WHERE id = $1", &[&account])
        .await
        .unwrap();
    assert_eq!(
        api.count(&count(eps[1])).await,
        0,
        "the account's endpoints' deliveries are gone"
    );
}
