//! Several RPC providers end to end (issue 32): pmw-live races two providers, each a breakable
//! proxy to the same anvil, one of them a second late; a reorg is seen through the fast one
//! first and through the slow one (old branch included) after. A WebSocket subscriber holds
//! exactly the chain's fills (`eth_getLogs` on the chain itself), ingest followed the reorg
//! once, and `pmwctl status` shows both providers from live's heartbeat.

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_core::trade::Allowlist;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::Cursor;
use pmw_sim::ReorgPlan;
use pmw_testkit::{eventually_every, run_bin, workspace_bin, ServiceHandle, TcpProxy};
use serde_json::Value;

use crate::harness::{canonical, connect, Fill, Harness};

const WITHIN: Duration = Duration::from_secs(60);

/// What a client holds after its frames: trades minus retracts.
fn held(frames: &[Value]) -> BTreeSet<Fill> {
    let fill = |f: &Value| {
        let c: Cursor = f["cursor"].as_str().unwrap().parse().unwrap();
        let hash = f["trade"]["block_hash"].as_str().unwrap().to_lowercase();
        (c.block, c.log_index as u64, hash)
    };
    let mut held = BTreeSet::new();
    for f in frames {
        if f["type"] == "trade" {
            held.insert(fill(f));
        } else if f["type"] == "retract" {
            held.remove(&fill(f));
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_seen_through_one_provider_first_leaves_subscribers_holding_the_chain() {
    let mut h = Harness::bare(&[]).await;
    let http = h.anvil.http_url();
    let target = format!("127.0.0.1:{}", h.anvil.port()).parse().unwrap();
    let (a, b) = (TcpProxy::start(target).await, TcpProxy::start(target).await);
    b.set_delay(Duration::from_millis(1_000));
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    let live = pmw_live::LiveConfig {
        live_start_block: Some(start + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        gamma_url: "http://127.0.0.1:9".into(),
        live_rpc_providers: Some(format!(
            "fast=ws://{0}|http://{0} slow=ws://{1}|http://{1}",
            a.addr, b.addr
        )),
        ..pmw_live::LiveConfig::default()
    };
    let core = h.core();
    h.live = Some(ServiceHandle::spawn(move |stop| {
        pmw_live::run_with(core, live, Allowlist::polymarket(), stop)
    }));
    let wallets = h.sim.config().wallets.clone();
    let (push, addr) = h.leader("push-a").await;
    let (_, key) = h.account(&wallets).await;
    let since = Cursor {
        block: start,
        log_index: MAX_LOG_INDEX,
    };
    let client = connect(addr, &key, Some(since)).await;
    h.trade(1, Duration::from_millis(150), 10).await;
    h.wait_pushed(WITHIN).await;
    let outcome = h
        .sim
        .reorg_with(ReorgPlan {
            replay_orphaned: true,
            ..ReorgPlan::new(3)
        })
        .await
        .unwrap();
    assert!(!outcome.orphaned.is_empty(), "the reorg orphaned fills");
    h.trade(1, Duration::from_millis(150), 10).await;
    let mut env = h.db.env();
    env.push(("PMW_RPC_HTTP_URL".into(), http.clone()));
    // The slow provider's view of both branches arrives: live's heartbeat shows both providers
    // healthy at the chain's head.
    let head = h.head().await;
    let caught_up = eventually_every(WITHIN, Duration::from_millis(500), || async {
        let (_, out, _) = run_bin(
            &workspace_bin("pmwctl"),
            &env,
            &["status", "--json"],
            WITHIN,
        )
        .await;
        let s: Value = serde_json::from_str(&out).unwrap_or_default();
        let list = s["providers"]["list"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let at_head = |r: &Value| r["standing"] == "healthy" && r["head"].as_u64() >= Some(head);
        (list.len() == 2 && list.iter().all(at_head)).then_some(())
    })
    .await;
    assert!(
        caught_up.is_some(),
        "both providers at head {head} in live's heartbeat"
    );
    h.wait_pushed(WITHIN).await;
    let wallet_set: Vec<String> = wallets
        .iter()
        .map(|w| w.to_string().to_lowercase())
        .collect();
    let expected = canonical(&http, start, &wallet_set).await;
    client
        .wait_seen(WITHIN, "exactly the chain's fills", |s| {
            held(&s.frames) == expected
        })
        .await;

    let (code, status, err) = run_bin(&workspace_bin("pmwctl"), &env, &["status"], WITHIN).await;
    assert_eq!(code, 0, "pmwctl status: {err}");
    push.stop().await.unwrap();
    let seen = client.done.await.unwrap();
    h.live.take().unwrap().stop().await.unwrap();

    let lines: Vec<&str> = status.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("providers     2 ")),
        "{status}"
    );
    for name in ["fast", "slow"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("  {name:<11} healthy, head "))),
            "{status}"
        );
    }
    let reorgs: i64 =
        h.db.connect()
            .await
            .query_one("SELECT count(*) FROM reorgs WHERE cause = 'reorg'", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(
        reorgs, 1,
        "the reorg followed once, no flap between branches"
    );
    assert!(!expected.is_empty());
    assert_eq!(
        held(&seen.frames),
        expected,
        "the subscriber holds exactly the chain's fills"
    );
    println!(
        "{}",
        lines
            .iter()
            .filter(|l| l.contains("provider")
                || l.starts_with("  fast")
                || l.starts_with("  slow"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
