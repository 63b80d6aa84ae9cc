//! Issue 30, items 5 and 6: limits hold per account, atomically (parallel key creations never
//! exceed the cap, parallel replays never exceed the hourly quota, more keys buy no more
//! requests), a `GET /v1/trades` page scans a bounded block span of a busy wallet and continues
//! by cursor, and a write that changes nothing leaves `subs_version` (push's reload trigger)
//! where it was while a real change moves it. Issue 42 item 4: requests without a key are
//! limited per client address (429 saying so), and a client with a key is not throttled by them.

use futures::future::join_all;
use pmw_api::ApiConfig;
use pmw_core::ch::trades::insert_trades;
use pmw_core::pg::accounts::MAX_KEYS_PER_ACCOUNT;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{set_push_cursor, set_watermark, test_config, trade_row, wallet, Api};

fn count(statuses: &[StatusCode], s: u16) -> usize {
    statuses.iter().filter(|x| x.as_u16() == s).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_key_creations_never_exceed_the_account_cap() {
    let api = Api::start().await;
    let (account, key) = api.account("pro").await;
    let calls = (0..40).map(|_| api.post("/v1/keys", &key, json!({"label": "x"})));
    let statuses: Vec<StatusCode> = join_all(calls).await.iter().map(|r| r.status).collect();
    let active = api
        .count(&format!(
            "SELECT count(*) FROM api_keys WHERE account_id = {account} AND revoked_ms IS NULL"
        ))
        .await;
    assert_eq!(active, MAX_KEYS_PER_ACCOUNT, "{statuses:?}");
    assert_eq!(count(&statuses, 201) as i64, MAX_KEYS_PER_ACCOUNT - 1);
    assert_eq!(
        count(&statuses, 422) as i64,
        40 - (MAX_KEYS_PER_ACCOUNT - 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_the_accounts_whatever_key_it_uses() {
    let api = Api::start_with(ApiConfig {
        api_rate_per_sec: 1,
        api_rate_burst: 5,
        ..test_config()
    })
    .await;
    let (_, first) = api.account("pro").await;
    let mut keys = vec![first.clone()];
    for _ in 0..3 {
        let r = api.post("/v1/keys", &first, json!({})).await;
        r.expect(201, None);
        keys.push(r.body["key"].as_str().unwrap().to_string());
    }
    // Let the burst refill after the creations, then 4 keys × 5 requests.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let mut ok = 0;
    for k in keys.iter().cycle().take(20) {
        if api.get("/v1/me", k).await.status == StatusCode::OK {
            ok += 1;
        }
    }
    // The burst (5) and at most a few refills while the 20 requests run: never 4 bursts.
    assert!(
        (5..=8).contains(&ok),
        "{ok} of 20 answered: the limit is per key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_replays_never_exceed_the_hourly_quota() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    set_push_cursor(&api.db, 10, 0).await;
    let r = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": "https://example.com/hook"}),
        )
        .await;
    r.expect(201, None);
    let path = format!("/v1/webhooks/{}/replay", r.body["id"]);
    let body = json!({"after": "000000000000-000000"});
    let calls = (0..40).map(|_| api.post(&path, &key, body.clone()));
    let answers = join_all(calls).await;
    let statuses: Vec<StatusCode> = answers.iter().map(|r| r.status).collect();
    let quota = pmw_api::routes::REPLAYS_PER_HOUR as usize;
    assert_eq!(count(&statuses, 202), quota, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 40 - quota, "{statuses:?}");
    let refused = answers.iter().find(|r| r.status == 429).unwrap();
    let wait: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3_600).contains(&wait), "{wait}");
    // Another account has its own quota.
    let (_, other) = api.account("pro").await;
    let r = api
        .post(
            "/v1/webhooks",
            &other,
            json!({"url": "https://example.com/hook"}),
        )
        .await;
    let path = format!("/v1/webhooks/{}/replay", r.body["id"]);
    api.post(&path, &other, body).await.expect(202, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_wallets_history_is_scanned_a_bounded_span_per_page() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let w = wallet(7);
    let span = pmw_api::routes::MAX_BLOCK_SPAN;
    // Trades far apart: 1000, 1000 + 1.5 spans, 1000 + 3 spans.
    let blocks = [1_000, 1_000 + span * 3 / 2, 1_000 + span * 3];
    let rows: Vec<_> = blocks.iter().map(|b| trade_row(*b, 0, &w)).collect();
    insert_trades(&api.db.ch, &rows).await.unwrap();
    set_watermark(&api.db, blocks[2] + 10).await;
    // History older than the hot ledger's window: ClickHouse is scanned a span at a time.
    api.db
        .connect()
        .await
        .execute(
            "UPDATE stored_cursor SET floor_block = $1",
            &[&(blocks[2] as i64 + 11)],
        )
        .await
        .unwrap();

    let page = |after: String| {
        let path = format!("/v1/trades?wallet={w}&limit=100&after={after}");
        let key = key.clone();
        let api = &api;
        async move { api.get(&path, &key).await }
    };
    let first = page("000000000000-000000".into()).await;
    first.expect(200, None);
    // One span from the first trade: one trade, more, next at the span's end.
    assert_eq!(
        first.body["trades"].as_array().unwrap().len(),
        1,
        "{}",
        first.text
    );
    assert_eq!(first.body["more"], true);
    assert_eq!(
        first.body["next"],
        format!("{:012}-999999", 1_000 + span - 1)
    );
    // The next pages continue from there and see every trade exactly once.
    let mut seen = vec![first.body["trades"][0]["trade"]["block_number"]
        .as_u64()
        .unwrap()];
    let mut next = first.body["next"].as_str().unwrap().to_string();
    for _ in 0..5 {
        let p = page(next.clone()).await;
        p.expect(200, None);
        for t in p.body["trades"].as_array().unwrap() {
            seen.push(t["trade"]["block_number"].as_u64().unwrap());
        }
        next = p.body["next"].as_str().unwrap().to_string();
        if p.body["more"] == false {
            break;
        }
    }
    assert_eq!(seen, blocks);
}

async fn version(api: &Api) -> i64 {
    api.count("SELECT seq FROM subs_version WHERE id = 1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_change_nothing_leave_subs_version() {
    let api = Api::start().await;
    let (account, key) = api.account("pro").await;
    let w = wallet(3);
    api.post("/v1/subscriptions", &key, json!({"wallet": w}))
        .await
        .expect(201, None);
    let v0 = version(&api).await;
    // No-op writes: an unknown key, an unfollowed wallet, an unknown endpoint, a row set to
    // the values it has.
    api.delete("/v1/keys/pmw_00000000", &key)
        .await
        .expect(404, None);
    let unfollowed = format!("/v1/subscriptions/{}", wallet(4));
    let r = api
        .call(Method::DELETE, &unfollowed, Some(&key), None)
        .await;
    assert!(r.status.is_client_error(), "{}", r.text);
    api.delete("/v1/webhooks/999999", &key)
        .await
        .expect(404, None);
    let c = api.db.pg.get().await.unwrap();
    c.execute("UPDATE accounts SET plan = plan WHERE id = $1", &[&account])
        .await
        .unwrap();
    c.execute("UPDATE api_keys SET label = 'x' WHERE false", &[])
        .await
        .unwrap();
    assert_eq!(
        version(&api).await,
        v0,
        "a write that changed nothing bumped"
    );
    // Real changes: each moves it.
    api.post("/v1/keys", &key, json!({}))
        .await
        .expect(201, None);
    let v1 = version(&api).await;
    assert!(v1 > v0);
    api.delete(&format!("/v1/subscriptions/{w}"), &key).await;
    let v2 = version(&api).await;
    assert!(v2 > v1);
    c.execute(
        "UPDATE accounts SET name = 'renamed' WHERE id = $1",
        &[&account],
    )
    .await
    .unwrap();
    assert!(version(&api).await > v2);
}

/// One address flooding anonymous paths (`/v1/ready`, an unknown route's 404) gets 429 past
/// its burst, told that the limit is the address's (it carried no key); a client with a key,
/// and another address behind the trusted proxy, are not throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_flood_gets_429_for_its_address_and_keyed_clients_are_not_throttled() {
    const BURST: usize = 20;
    let api = Api::start_with(ApiConfig {
        api_anon_rate_per_sec: 1,
        api_anon_rate_burst: BURST as u32,
        ..test_config()
    })
    .await;
    let (_, key) = api.account("pro").await;
    let mut statuses = Vec::new();
    let mut refused = None;
    for i in 0..3 * BURST {
        let path = if i % 2 == 0 {
            "/v1/ready"
        } else {
            "/no/such/route"
        };
        let r = api.call(Method::GET, path, None, None).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some((r.body.clone(), r.text.clone(), r.headers.clone()));
        }
        statuses.push(r.status);
    }
    let throttled = count(&statuses, 429);
    println!("anonymous flood: {throttled} of {} refused", statuses.len());
    assert!(
        throttled >= 2 * BURST - 2
            && !statuses[..BURST - 1].contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    let (body, text, headers) = refused.expect("a 429");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("from this address") && !message.contains("API key"),
        "{text}"
    );
    assert!(headers.contains_key("retry-after"), "{headers:?}");

    // The paying client, from the same address: never throttled by the flood.
    for _ in 0..BURST {
        api.get("/v1/me", &key).await.expect(200, None);
    }
    // Another client address forwarded by the trusted proxy (loopback) has its own budget.
    let other = api
        .http
        .get(format!("{}/v1/ready", api.base))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_ne!(other.status(), StatusCode::TOO_MANY_REQUESTS);
}
