//! Filters on real traffic: pmw-sim trades on anvil, pmw-live ingests (with the simulator's
//! Gamma-compatible market server, so trades carry their market), pmw-push and pmw-api run
//! in-process. Subscriptions and a webhook endpoint get filters through the API; a WebSocket
//! session, a resuming one (the replay path) and the endpoint must receive exactly the fills the
//! simulator put on chain that pass those filters, computed here from the simulator's own record
//! of the chain (`Emitted`: maker, side, amounts in base units, token) and its market list, never
//! from pmw's code.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use pmw_api::ApiConfig;
use pmw_core::trade::Allowlist;
use pmw_core::{Address, Cursor};
use pmw_push::webhook::WebhookConfig;
use pmw_sim::Emitted;
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::{eventually, eventually_every, stack_env, ServiceHandle};
use pmw_tools::chain::Chain;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::api::{push_config, test_config, Api};

pub(crate) const WITHIN: Duration = Duration::from_secs(90);

/// Every frame of a WebSocket session (`since`: resume point), until it closes.
pub(crate) async fn listen(
    addr: SocketAddr,
    key: &str,
    since: Option<&str>,
) -> mpsc::UnboundedReceiver<Value> {
    let q = since.map_or(String::new(), |s| format!("?since={s}"));
    let mut req = format!("ws://{addr}/v1/ws{q}")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .expect("ws connect");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (_sink, mut stream) = ws.split();
        while let Some(Ok(Message::Text(t))) = stream.next().await {
            if tx.send(serde_json::from_str::<Value>(&t).unwrap()).is_err() {
                break;
            }
        }
    });
    rx
}

pub(crate) async fn next(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(WITHIN, rx.recv())
        .await
        .expect("a frame in time")
        .expect("session open")
}

pub(crate) fn cursor_of(v: &Value) -> Cursor {
    v["cursor"].as_str().unwrap().parse().unwrap()
}

pub(crate) fn key_of(e: &Emitted) -> Cursor {
    Cursor {
        block: e.block_number,
        log_index: e.log_index as u32,
    }
}

/// Base units (6 decimals) as an exact decimal string.
pub(crate) fn decimal(units: u64) -> String {
    format!("{}.{:06}", units / 1_000_000, units % 1_000_000)
}

pub(crate) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The filters of the test, as plain predicates over the simulator's records.
struct Oracle {
    buyer: Address,
    min_collateral: u64,
    market_wallet: Address,
    /// Token ids (decimal) of the listed condition's market, plus the listed token.
    market_tokens: BTreeSet<String>,
    /// Token ids of the listed condition's market alone (matched by condition id only).
    condition_tokens: BTreeSet<String>,
    plain: Address,
    /// The endpoint's own filter.
    min_shares: u64,
}

impl Oracle {
    /// What the account's subscriptions let through (the WebSocket's share).
    fn subscribed(&self, e: &Emitted) -> bool {
        if e.maker == self.buyer {
            e.side == pmw_sim::Side::Buy && e.collateral >= self.min_collateral
        } else if e.maker == self.market_wallet {
            self.market_tokens.contains(&e.token_id.to_string())
        } else {
            e.maker == self.plain
        }
    }

    /// What the endpoint gets: the subscriptions' share that also passes its own filter.
    fn hooked(&self, e: &Emitted) -> bool {
        self.subscribed(e) && e.shares >= self.min_shares
    }

    /// Whether `fills` exercise every filter both ways.
    fn telling(&self, fills: &[Emitted]) -> bool {
        let of = |w: Address| fills.iter().filter(move |e| e.maker == w);
        let both =
            |w: Address| of(w).any(|e| self.subscribed(e)) && of(w).any(|e| !self.subscribed(e));
        both(self.buyer)
            && both(self.market_wallet)
            && of(self.market_wallet)
                .any(|e| self.condition_tokens.contains(&e.token_id.to_string()))
            && fills.iter().any(|e| self.hooked(e))
            && fills.iter().any(|e| self.subscribed(e) && !self.hooked(e))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_sessions_replays_and_webhooks_get_exactly_the_matching_fills_on_chain() {
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

    // Warm-up, before push runs: trade until every token has been seen and its market resolved,
    // so every trade push reads later carries its market (a condition id can match).
    let tokens: usize = markets.iter().map(|m| m.token_ids.len()).sum();
    let warm: RefCell<Vec<Emitted>> = RefCell::default();
    let pg = pmw_core::pg::pool(&core, "test-oracle").unwrap();
    let one = |sql: &'static str| {
        let pg = pg.clone();
        async move {
            let c = pg.get().await.unwrap();
            c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
        }
    };
    let resolved = eventually_every(WITHIN, Duration::from_millis(200), || async {
        let n = one("SELECT count(*) FROM market_names WHERE status = 'resolved'").await;
        if n as usize >= tokens {
            return true;
        }
        let more = sim.run_matches(4).await.unwrap();
        warm.borrow_mut().extend(more);
        false
    })
    .await;
    assert!(resolved, "every market resolved by pmw-live");
    let warm = warm.into_inner();
    // Push starts at the ingest watermark: past every warm-up fill.
    let warm_last = warm.iter().map(|e| e.block_number).max().unwrap() as i64;
    assert!(
        eventually(WITHIN, || async {
            one("SELECT coalesce(max(block_number), 0) FROM ingest_cursor").await >= warm_last
        })
        .await,
        "warm-up ingested"
    );

    let api = Api::start_on(
        db,
        ApiConfig {
            api_allow_private_webhooks: true,
            ..test_config()
        },
    )
    .await;
    let (_, key) = api.account("pro").await;
    let w = &sim.config().wallets;
    let listed = &markets[0];
    let token = markets[1].token_ids[0].to_string();
    let oracle = Oracle {
        buyer: w[0],
        min_collateral: median(warm.iter().map(|e| e.collateral).collect()),
        market_wallet: w[1],
        market_tokens: listed
            .token_ids
            .iter()
            .map(|t| t.to_string())
            .chain([token.clone()])
            .collect(),
        condition_tokens: listed.token_ids.iter().map(|t| t.to_string()).collect(),
        plain: w[2],
        min_shares: median(warm.iter().map(|e| e.shares).collect()),
    };
    let subs = [
        json!({"wallet": w[0].to_lower_hex(), "filter": {"side": "BUY", "min_collateral": decimal(oracle.min_collateral)}}),
        json!({"wallet": w[1].to_lower_hex(), "filter": {"markets": [listed.condition_id.to_string(), token]}}),
        json!({"wallet": w[2].to_lower_hex()}),
    ];
    for s in subs {
        api.post("/v1/subscriptions", &key, s)
            .await
            .expect(201, None);
    }
    let hooks = Receiver::start(vec![Step::status(204)]).await;
    api.post(
        "/v1/webhooks",
        &key,
        json!({"url": hooks.url(), "filter": {"min_shares": decimal(oracle.min_shares)}}),
    )
    .await
    .expect(201, None);

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

    // Trade until the fills exercise every filter both ways.
    let mut fills: Vec<Emitted> = Vec::new();
    for _ in 0..8 {
        fills.extend(sim.run_matches(6).await.unwrap());
        if oracle.telling(&fills) {
            break;
        }
    }
    assert!(
        oracle.telling(&fills),
        "the simulator's fills exercise every filter"
    );
    let expected: Vec<Cursor> = {
        let mut v: Vec<Cursor> = fills
            .iter()
            .filter(|e| oracle.subscribed(e))
            .map(key_of)
            .collect();
        v.sort();
        v
    };
    let hooked: BTreeSet<Cursor> = fills
        .iter()
        .filter(|e| oracle.hooked(e))
        .map(key_of)
        .collect();
    let last_block = fills.iter().map(|e| e.block_number).max().unwrap();

    // The live session: exactly the expected fills, in ledger order, and nothing else by the time
    // push has read the last block (two heartbeats whose head is past it).
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
            "more trades than the filters let through: {got:?}"
        );
    }
    assert_eq!(got, expected, "the live session's trades");

    // A session resuming from before the trades: the replay applies the same filters.
    let mut again = listen(push_addr, &key, Some(&start)).await;
    assert_eq!(next(&mut again).await["type"], "hello");
    let mut replayed = Vec::new();
    loop {
        let v = next(&mut again).await;
        match v["type"].as_str() {
            Some("trade") => replayed.push(cursor_of(&v)),
            Some("heartbeat") => break, // heartbeats start after the replay
            _ => {}
        }
    }
    assert_eq!(replayed, expected, "the replayed trades");

    // The endpoint: the subscriptions' share that passes its own filter, each once.
    let delivered = eventually(WITHIN, || async {
        hooks.count() >= hooked.len()
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
        hooked.len()
    );
    let bodies: Vec<Value> = hooks.hits().iter().map(|h| h.json()).collect();
    assert!(bodies.iter().all(|b| b["type"] == "trade"), "{bodies:?}");
    let received: Vec<Cursor> = bodies.iter().map(cursor_of).collect();
    let unique: BTreeSet<Cursor> = received.iter().copied().collect();
    assert_eq!(
        unique.len(),
        received.len(),
        "each delivered once: {received:?}"
    );
    assert_eq!(unique, hooked, "the endpoint's trades");
    push.stop().await.unwrap();
}
