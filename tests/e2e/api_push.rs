//! Subscriptions changed through the API reach a running push leader at once (NOTIFY in the
//! changing transaction) and survive its restart (they are in Postgres): pmw-sim trades on
//! anvil, pmw-live ingests, pmw-push and pmw-api run in-process, a WebSocket client listens.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use crate::api::{start_push, test_config, Api};
use crate::harness::start_live;
use futures::StreamExt;
use pmw_core::{Address, Cursor};
use pmw_sim::Emitted;
use pmw_testkit::stack_env;
use pmw_tools::chain::Chain;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const WITHIN: Duration = Duration::from_secs(60);

/// Trade cursors received by a WebSocket session, until it closes.
async fn listen(addr: SocketAddr, key: &str) -> mpsc::UnboundedReceiver<Value> {
    let mut req = format!("ws://{addr}/v1/ws").into_client_request().unwrap();
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

async fn next_of(rx: &mut mpsc::UnboundedReceiver<Value>, kind: &str) -> Value {
    loop {
        let v = tokio::time::timeout(WITHIN, rx.recv())
            .await
            .expect("frame in time")
            .expect("open");
        if v["type"] == kind {
            return v;
        }
    }
}

fn fills_of(fills: &[Emitted], w: &[Address]) -> Vec<Cursor> {
    let mut v: Vec<Cursor> = fills
        .iter()
        .filter(|e| w.contains(&e.maker))
        .map(|e| Cursor {
            block: e.block_number,
            log_index: e.log_index as u32,
        })
        .collect();
    v.sort();
    v
}

async fn trades(rx: &mut mpsc::UnboundedReceiver<Value>, n: usize) -> Vec<Cursor> {
    let mut got = Vec::new();
    while got.len() < n {
        got.push(
            next_of(rx, "trade").await["cursor"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap(),
        );
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_subscription_changes_reach_push_at_once_and_survive_its_restart() {
    let Chain { db, anvil, sim } = Chain::start(stack_env(), &[]).await;
    let mut core = db.cfg.clone();
    core.rpc_ws_url = anvil.ws_url();
    core.rpc_http_url = anvil.http_url();
    let head = sim.rpc().latest_block().await.unwrap().number.0;
    let _live = start_live(core.clone(), head);
    let (push, push_addr) = start_push(core.clone(), "push-a").await;
    let api = Api::start_on(db, test_config()).await;
    let (_, key) = api.account("pro").await;
    let w: Vec<Address> = sim.config().wallets[..2].to_vec();

    let mut ws = listen(push_addr, &key).await;
    next_of(&mut ws, "hello").await;
    // Subscribe through the API, then trade at once: every fill of the wallets arrives.
    for x in &w {
        api.post(
            "/v1/subscriptions",
            &key,
            json!({"wallet": x.to_lower_hex()}),
        )
        .await
        .expect(201, None);
    }
    let expected = fills_of(&sim.run_matches(4).await.unwrap(), &w);
    assert!(!expected.is_empty());
    assert_eq!(trades(&mut ws, expected.len()).await, expected);

    // The leader restarts: the new one knows the subscription from Postgres.
    push.stop().await.unwrap();
    let (push, push_addr) = start_push(core.clone(), "push-b").await;
    let mut ws = listen(push_addr, &key).await;
    next_of(&mut ws, "hello").await;
    let expected = fills_of(&sim.run_matches(4).await.unwrap(), &w);
    assert!(!expected.is_empty());
    assert_eq!(trades(&mut ws, expected.len()).await, expected);

    // Unsubscribe through the API: later fills of the wallets are no longer pushed.
    for x in &w {
        let path = format!("/v1/subscriptions/{}", x.to_lower_hex());
        api.call(Method::DELETE, &path, Some(&key), None)
            .await
            .expect(204, None);
    }
    let later: BTreeSet<Cursor> = fills_of(&sim.run_matches(4).await.unwrap(), &w)
        .into_iter()
        .collect();
    assert!(!later.is_empty());
    // Heartbeats whose head is past the last block show push has processed it.
    let last_block = later.iter().map(|c| c.block).max().unwrap();
    let mut processed = 0;
    loop {
        let v = tokio::time::timeout(WITHIN, ws.recv())
            .await
            .expect("frames in time")
            .expect("open");
        if v["type"] == "trade" {
            let c: Cursor = v["cursor"].as_str().unwrap().parse().unwrap();
            assert!(
                !later.contains(&c),
                "a trade of an unfollowed wallet was pushed: {c}"
            );
        }
        if v["type"] == "heartbeat" && v["head"].as_u64().unwrap_or(0) >= last_block {
            processed += 1;
            if processed == 2 {
                break; // the round that read that block has dispatched
            }
        }
    }
    push.stop().await.unwrap();
}
