//! Real WebSocket frames and real webhook bodies, produced by pmw-push from pmw-sim's trades
//! ingested by pmw-live, validated against the schemas pmw-api publishes (AsyncAPI for `/v1/ws`,
//! OpenAPI `webhooks`) by an independent validator (Python `jsonschema`).

use std::time::Duration;

use pmw_sim::demo_wallets;
use pmw_testkit::assert_eventually;
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::seed::Endpoint;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::harness::{connect_url, first_of, Harness};

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_frames_and_webhook_bodies_match_the_published_schemas() {
    // anvil's `finalized` trails its head by 4 blocks: `final`s arrive too.
    let h = Harness::with_anvil(&["--slots-in-an-epoch", "2"]).await;
    let (push, addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[0], demo_wallets(6)[3]];
    let (account, key) = h.account(&mine).await;
    // One endpoint for trades and small finals, one for full finals only.
    let hook = Receiver::cycling(vec![Step::status(200)]).await;
    let finals_hook = Receiver::cycling(vec![Step::status(200)]).await;
    let secret = pmw_core::webhook::Secret::generate();
    let c = h.db.connect().await;
    for (r, events) in [
        (&hook, vec!["trade", "final"]),
        (&finals_hook, vec!["final"]),
    ] {
        let (url, secret) = (r.url(), secret.expose());
        Endpoint::new(account, &url, &secret)
            .events(&events)
            .insert(&c)
            .await;
    }
    c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    let mut ws = connect_url(&format!("ws://{addr}/v1/ws?events=trade,final"), Some(&key)).await;
    let mut finals_ws = connect_url(&format!("ws://{addr}/v1/ws?events=final"), Some(&key)).await;
    first_of(&mut ws, "hello").await;
    first_of(&mut finals_ws, "hello").await;
    // No wait for the NOTIFY to be handled: each lane's round reads `subs_version` with its state
    // and reloads a stale index before it matches (push/index.rs proves it with the NOTIFY lost).
    h.sim.run_matches(12).await.unwrap();
    h.wait_pushed(WITHIN).await;
    first_of(&mut ws, "trade").await;
    first_of(&mut ws, "heartbeat").await;
    for _ in 0..6 {
        h.sim.rpc().mine().await.unwrap(); // the traded blocks finalize
    }
    first_of(&mut ws, "final").await;
    first_of(&mut finals_ws, "final").await;
    let has = |r: &Receiver, kind: &str| r.hits().iter().any(|h| h.json()["type"] == kind);
    assert_eventually!(
        WITHIN,
        has(&hook, "trade") && has(&hook, "final") && has(&finals_hook, "final"),
        "webhooks of every kind did not arrive"
    );
    push.stop().await.unwrap();
    let mut frames: Vec<Value> = Vec::new();
    for seen in [ws.done.await.unwrap(), finals_ws.done.await.unwrap()] {
        frames.extend(seen.frames.into_iter().map(|mut f| {
            f.as_object_mut().unwrap().remove("_recv_ms");
            f
        }));
    }
    let bodies: Vec<Value> = hook
        .hits()
        .iter()
        .chain(finals_hook.hits().iter())
        .map(|h| h.json())
        .collect();
    let input = json!({
        "asyncapi": pmw_api::routes::events::asyncapi(),
        "openapi": serde_json::from_str::<Value>(pmw_api::routes::openapi_json()).unwrap(),
        "frames": frames,
        "bodies": bodies,
    });
    let root = pmw_testkit::repo_root();
    let mut child = tokio::process::Command::new(root.join("tools/python/.venv/bin/python"))
        .arg(root.join("tools/python/validate_events.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tools/python venv (scripts/install python)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "schema violations:\n{text}");
    let counts: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    for k in [
        "ws:hello",
        "ws:trade",
        "ws:final",
        "ws:heartbeat",
        "webhook:trade",
        "webhook:final",
    ] {
        assert!(
            counts[k].as_u64().unwrap_or(0) >= 1,
            "{k} validated: {counts}"
        );
    }
}
