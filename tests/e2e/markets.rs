//! Market subscriptions (issue 45): `/v1/markets` resolves condition ids, token ids and event
//! slugs through pmw-sim's Gamma-compatible server, within the plan's market cap and
//! `min_collateral` floor; and on real traffic (pmw-sim on anvil, pmw-live, pmw-push, pmw-api in
//! process) a market follower receives every fill in its market above its floor whatever the
//! wallet, live, replayed and by webhook, and a fill of a followed wallet in a followed market
//! arrives once. What is expected is computed from the simulator's own record of the chain.

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::plans::Plan;
use pmw_core::trade::Allowlist;
use pmw_core::{Address, Cursor};
use pmw_push::webhook::WebhookConfig;
use pmw_sim::Emitted;
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::{eventually, stack_env, ServiceHandle, TestDb};
use pmw_tools::chain::Chain;
use reqwest::Method;
use serde_json::{json, Value};

use crate::api::{push_config, test_config, Api};
use crate::filters::{cursor_of, decimal, key_of, listen, median, next, WITHIN};

/// An API whose plan `markets` allows `max` markets with a `floor` (USDC), resolving markets
/// with the Gamma-compatible server at `gamma`.
fn config(gamma: &str, max: u32, floor: &str) -> ApiConfig {
    let mut cfg = ApiConfig {
        api_allow_private_webhooks: true,
        gamma_url: gamma.to_string(),
        ..test_config()
    };
    cfg.api_plans.insert(
        "markets".into(),
        Plan {
            max_wallets: 10,
            max_webhook_endpoints: 2,
            max_ws_sessions: 4,
            max_markets: max,
            market_min_collateral: floor.into(),
        },
    );
    cfg
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn market_subscriptions_resolve_slugs_conditions_and_tokens_within_the_plan() {
    let markets = pmw_sim::config::demo_markets();
    let (gamma, _server) = pmw_sim::markets::serve("127.0.0.1:0".parse().unwrap(), markets.clone())
        .await
        .expect("markets server");
    let api = Api::start_with(config(&format!("http://{gamma}"), 3, "50")).await;
    let (_, key) = api.account("markets").await;
    let floor = json!({"min_collateral": "50"});

    // An event slug expands to every market of the event (the sim's two-market cup).
    let cup: Vec<_> = markets
        .iter()
        .filter(|m| m.event_slug() == "pmw-demo-cup")
        .collect();
    assert_eq!(cup.len(), 2);
    let r = api
        .post(
            "/v1/markets",
            &key,
            json!({"event": "pmw-demo-cup", "filter": floor}),
        )
        .await;
    r.expect(201, None);
    assert_eq!(r.body["kind"], "event");
    let want: BTreeSet<String> = cup
        .iter()
        .flat_map(|m| m.token_ids.iter().map(|t| t.to_string()))
        .collect();
    assert_eq!(strings(&r.body["tokens"]), want, "{}", r.text);
    assert_eq!(strings(&r.body["conditions"]).len(), 2);
    let stored = api
        .count("SELECT cardinality(tokens)::bigint FROM market_subscriptions WHERE kind = 'event'")
        .await;
    assert_eq!(stored, 4, "the tokens are stored: push matches by them");
    // Again: already followed, nothing changes.
    api.post(
        "/v1/markets",
        &key,
        json!({"event": "pmw-demo-cup", "filter": floor}),
    )
    .await
    .expect(200, None);

    // A token id follows that outcome only, and counts its market.
    let token = markets[0].token_ids[1].to_string();
    let r = api
        .post(
            "/v1/markets",
            &key,
            json!({"market": token, "filter": floor}),
        )
        .await;
    r.expect(201, None);
    assert_eq!(strings(&r.body["tokens"]), BTreeSet::from([token.clone()]));

    // The cap counts distinct markets: a fourth one is refused; the third's condition is fine
    // (already counted through its token).
    let c0 = markets[0].condition_id.to_string();
    api.post("/v1/markets", &key, json!({"market": c0, "filter": floor}))
        .await
        .expect(201, None);
    let c1 = markets[1].condition_id.to_string();
    let r = api
        .post("/v1/markets", &key, json!({"market": c1, "filter": floor}))
        .await;
    r.expect(403, Some("plan_limit"));
    assert!(r.text.contains("allows 3 markets"), "{}", r.text);

    // The floor: absent or below it is refused with the plan's figure.
    api.delete(&format!("/v1/markets/{c0}"), &key)
        .await
        .expect(204, None);
    for filter in [
        json!(null),
        json!({"min_collateral": "49.99"}),
        json!({"side": "BUY"}),
    ] {
        let r = api
            .post("/v1/markets", &key, json!({"market": c1, "filter": filter}))
            .await;
        r.expect(422, Some("min_collateral_floor"));
        assert!(r.text.contains("at least 50"), "{}", r.text);
    }
    let r = api
        .post(
            "/v1/markets",
            &key,
            json!({"market": c1, "filter": {"min_collateral": "50", "markets": [c1]}}),
        )
        .await;
    r.expect(422, Some("invalid_filter"));

    // Names the markets API does not know, and malformed ones, are 422; nothing stored.
    let unknown = format!("0x{}", "ab".repeat(32));
    for body in [
        json!({"market": unknown, "filter": floor}),
        json!({"event": "no-such-event", "filter": floor}),
        json!({"market": "12345", "filter": floor}),
    ] {
        api.post("/v1/markets", &key, body)
            .await
            .expect(422, Some("market_not_found"));
    }
    for body in [
        json!({"market": "pmw-demo-cup", "filter": floor}),
        json!({"event": "Not A Slug", "filter": floor}),
        json!({"market": c1, "event": "pmw-demo-cup", "filter": floor}),
        json!({"filter": floor}),
    ] {
        api.post("/v1/markets", &key, body)
            .await
            .expect(422, Some("invalid_market"));
    }

    // PATCH changes the filter (the floor still holds); the list shows the plan's limits.
    let path = "/v1/markets/pmw-demo-cup";
    let r = api
        .call(
            Method::PATCH,
            path,
            Some(&key),
            Some(json!({"filter": {"side": "BUY", "min_collateral": "75"}})),
        )
        .await;
    r.expect(200, None);
    assert_eq!(
        r.body["filter"],
        json!({"side": "BUY", "min_collateral": "75"})
    );
    api.call(
        Method::PATCH,
        path,
        Some(&key),
        Some(json!({"filter": null})),
    )
    .await
    .expect(422, Some("min_collateral_floor"));
    let me = api.get("/v1/me", &key).await;
    assert_eq!(me.body["usage"]["markets"], 3, "{}", me.text);
    assert_eq!(me.body["plan"]["max_markets"], 3, "{}", me.text);
    let list = api.get("/v1/markets", &key).await;
    list.expect(200, None);
    assert_eq!(list.body["limit"], 3);
    assert_eq!(list.body["min_collateral_floor"], "50");
    assert_eq!(list.body["markets"].as_array().unwrap().len(), 2);
    api.delete("/v1/markets/no-such-event", &key)
        .await
        .expect(404, Some("not_found"));

    // A markets API that does not answer: 503, never an empty subscription.
    let down = Api::start_on(TestDb::new().await, config("http://127.0.0.1:9", 3, "50")).await;
    let (_, key) = down.account("markets").await;
    down.post("/v1/markets", &key, json!({"market": c1, "filter": floor}))
        .await
        .expect(503, Some("markets_unavailable"));
    assert_eq!(
        down.count("SELECT count(*) FROM market_subscriptions")
            .await,
        0
    );
}

/// Who gets what: the followed wallet's every fill, and any wallet's fill in the followed market
/// at or above the floor.
struct Oracle {
    wallet: Address,
    market_tokens: BTreeSet<String>,
    floor: u64,
}

impl Oracle {
    fn in_market(&self, e: &Emitted) -> bool {
        self.market_tokens.contains(&e.token_id.to_string())
    }

    fn wanted(&self, e: &Emitted) -> bool {
        e.maker == self.wallet || (self.in_market(e) && e.collateral >= self.floor)
    }

    /// Whether `fills` hold a fill reaching only through the market, one in the market kept out
    /// by the floor, and one of the followed wallet in the market above the floor (both match).
    fn telling(&self, fills: &[Emitted]) -> bool {
        let market = |e: &&Emitted| self.in_market(e);
        let others = || {
            fills
                .iter()
                .filter(market)
                .filter(|e| e.maker != self.wallet)
        };
        others().any(|e| e.collateral >= self.floor)
            && others().any(|e| e.collateral < self.floor)
            && fills
                .iter()
                .filter(market)
                .any(|e| e.maker == self.wallet && e.collateral >= self.floor)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_follower_gets_any_wallets_fills_above_its_floor_once_live_replayed_and_hooked() {
    let Chain { db, anvil, sim } = Chain::start(stack_env(), &[]).await;
    let markets = sim.config().markets.clone();
    let (gamma, _gamma) = pmw_sim::markets::serve("127.0.0.1:0".parse().unwrap(), markets.clone())
        .await
        .expect("markets server");
    let mut core = db.cfg.clone();
    core.rpc_ws_url = anvil.ws_url();
    core.rpc_http_url = anvil.http_url();
    let head = sim.rpc().latest_block().await.unwrap().number.0;
    let live_cfg = pmw_live::LiveConfig {
        live_start_block: Some(head + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        gamma_url: format!("http://{gamma}"),
        ..pmw_live::LiveConfig::default()
    };
    let live_core = core.clone();
    let _live = ServiceHandle::spawn(move |stop| {
        pmw_live::run_with(live_core, live_cfg, Allowlist::polymarket(), stop)
    });
    // Warm-up fills give the floor: the median collateral, so fills fall on both sides.
    let warm = sim.run_matches(8).await.unwrap();
    let warm_last = warm.iter().map(|e| e.block_number).max().unwrap() as i64;
    let pg = pmw_core::pg::pool(&core, "test-oracle").unwrap();
    let ingested = eventually(WITHIN, || async {
        let c = pg.get().await.unwrap();
        let sql = "SELECT coalesce(max(block_number), 0) FROM ingest_cursor";
        c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) >= warm_last
    })
    .await;
    assert!(ingested, "warm-up ingested");

    let api = Api::start_on(db, config(&format!("http://{gamma}"), 5, "0")).await;
    let (_, key) = api.account("markets").await;
    let followed = &markets[0];
    let oracle = Oracle {
        wallet: sim.config().wallets[0],
        market_tokens: followed.token_ids.iter().map(|t| t.to_string()).collect(),
        floor: median(warm.iter().map(|e| e.collateral).collect()),
    };
    api.post(
        "/v1/subscriptions",
        &key,
        json!({"wallet": oracle.wallet.to_lower_hex()}),
    )
    .await
    .expect(201, None);
    let market = json!({"market": followed.condition_id.to_string(), "filter": {"min_collateral": decimal(oracle.floor)}});
    api.post("/v1/markets", &key, market)
        .await
        .expect(201, None);
    let hooks = Receiver::start(vec![Step::status(204)]).await;
    let endpoint = api
        .post("/v1/webhooks", &key, json!({"url": hooks.url()}))
        .await;
    endpoint.expect(201, None);
    let endpoint = endpoint.body["id"].as_i64().unwrap();

    let (push, push_addr) = crate::harness::start_push(
        core.clone(),
        "push-a",
        push_config(),
        WebhookConfig {
            allow_private_destinations: true,
            poll_interval: Duration::from_millis(200),
            ..WebhookConfig::default()
        },
    )
    .await;
    let mut ws = listen(push_addr, &key, None).await;
    let hello = next(&mut ws).await;
    assert_eq!(hello["type"], "hello");
    let start = hello["resume"].as_str().unwrap().to_string();

    let mut fills: Vec<Emitted> = Vec::new();
    for _ in 0..12 {
        fills.extend(sim.run_matches(6).await.unwrap());
        if oracle.telling(&fills) {
            break;
        }
    }
    assert!(
        oracle.telling(&fills),
        "the fills exercise the market, its floor and the overlap"
    );
    let mut expected: Vec<Cursor> = fills
        .iter()
        .filter(|e| oracle.wanted(e))
        .map(key_of)
        .collect();
    expected.sort();
    let last_block = fills.iter().map(|e| e.block_number).max().unwrap();

    // Live: exactly the expected fills, each once, in ledger order.
    let mut got = Vec::new();
    let mut past = 0;
    while past < 2 || got.len() < expected.len() {
        let v = next(&mut ws).await;
        match v["type"].as_str() {
            Some("trade") => got.push(cursor_of(&v)),
            Some("heartbeat") if v["head"].as_u64().unwrap_or(0) >= last_block => past += 1,
            _ => {}
        }
        assert!(
            got.len() <= expected.len(),
            "more trades than followed: {got:?}"
        );
    }
    assert_eq!(got, expected, "the live session's trades");

    // A resume from before the trades replays the same, each once.
    let mut again = listen(push_addr, &key, Some(&start)).await;
    assert_eq!(next(&mut again).await["type"], "hello");
    let mut replayed = Vec::new();
    loop {
        let v = next(&mut again).await;
        match v["type"].as_str() {
            Some("trade") => replayed.push(cursor_of(&v)),
            Some("heartbeat") => break,
            _ => {}
        }
    }
    assert_eq!(replayed, expected, "the replayed trades");

    // The endpoint: the same fills, one delivery each.
    let want: BTreeSet<Cursor> = expected.iter().copied().collect();
    let delivered = eventually(WITHIN, || async {
        hooks.count() >= want.len()
            && api
                .count("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'")
                .await
                == 0
            && api
                .count("SELECT coalesce(max(block_number), 0) FROM webhook_cursor")
                .await
                >= last_block as i64
    })
    .await;
    assert!(
        delivered,
        "webhooks delivered: {} of {}",
        hooks.count(),
        want.len()
    );
    let received: Vec<Cursor> = hooks.hits().iter().map(|h| cursor_of(&h.json())).collect();
    let unique: BTreeSet<Cursor> = received.iter().copied().collect();
    assert_eq!(
        unique.len(),
        received.len(),
        "each delivered once: {received:?}"
    );
    assert_eq!(unique, want, "the endpoint's trades");

    // The REST backfill lists the same, each once.
    let after = start.split(':').next().unwrap();
    let page = api
        .get(&format!("/v1/trades?after={after}&limit=1000"), &key)
        .await;
    page.expect(200, None);
    let listed: Vec<Cursor> = page.body["trades"]
        .as_array()
        .unwrap()
        .iter()
        .map(cursor_of)
        .filter(|c| c.block <= last_block)
        .collect();
    assert_eq!(listed, expected, "GET /v1/trades");

    // A webhook replay from before the trades queues the same fills again, each once.
    let r = api
        .post(
            &format!("/v1/webhooks/{endpoint}/replay"),
            &key,
            json!({"after": after}),
        )
        .await;
    r.expect(202, None);
    assert_eq!(r.body["trades"], json!(want.len()), "{}", r.text);
    assert_eq!(r.body["enqueued"], json!(want.len()), "{}", r.text);
    push.stop().await.unwrap();
}
