//! Limits that hold across edges (issue 42 item 4), on real edges (pmw-edge in-process, push in
//! edge mode, NATS JetStream, one Postgres): an account at its plan's session cap cannot open one
//! more session through another edge; an address's failed-authentication budget is the fleet's,
//! not each edge's; an edge cut from Postgres (a TCP proxy cut for that edge only) closes its
//! sessions with 1013 within its stale-view bound, so a key revoked meanwhile does not keep
//! streaming, and reports itself unhealthy. And a resume's replay counts the rows it scans: a
//! filter that lets nothing through does not make the replay read past the window.

use std::time::Duration;

use pmw_core::{CoreConfig, Cursor};
use pmw_push::config::PushConfig;
use pmw_sim::demo_wallets;
use pmw_testkit::{assert_eventually, bound_within, ServiceHandle};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::edge::{drop_stream, edge_push};
use super::nats::{keys, shared_bus, TestBus};
use super::WITHIN;
use crate::harness::{
    change_as_api, closed_with, connect, hello_cursor, key_id, Harness, LEADS_WITHIN,
};

/// pmw-edge in-process on `bus` with `core`'s stores, settings tweaked; its handle and address.
async fn edge_on(
    core: CoreConfig,
    bus: &TestBus,
    tweak: impl FnOnce(&mut pmw_edge::EdgeConfig),
) -> (ServiceHandle, std::net::SocketAddr) {
    let mut cfg = pmw_edge::EdgeConfig::with_nats(&bus.urls.join(","), &keys().1);
    cfg.edge_nats_stream = bus.stream.clone();
    cfg.edge_nats_prefix = bus.prefix.clone();
    cfg.edge_nats_user = Some(bus.edge.user.clone());
    cfg.edge_nats_password = Some(bus.edge.password.clone().into());
    cfg.edge_nats_ca = bus.edge.ca.clone();
    cfg.edge_ws_heartbeat_ms = 1_000;
    tweak(&mut cfg);
    let (edge, rx) = ServiceHandle::spawn_bound(move |stop, bound| {
        pmw_edge::run_with(core, cfg, stop, Some(bound))
    });
    (edge, bound_within(rx, LEADS_WITHIN).await)
}

/// Push in edge mode on a fresh stream with a few rounds on it (an edge starts from them).
async fn fleet_push(h: &Harness) -> (ServiceHandle, TestBus) {
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(h, &bus));
    h.trade(1, Duration::from_millis(50), 2).await;
    h.wait_pushed(WITHIN).await;
    (push, bus)
}

/// A connect's HTTP answer: `Ok` when upgraded (the session then decides), or the refusal's
/// status and body.
async fn upgrade(addr: std::net::SocketAddr, key: &str) -> Result<(), (u16, String)> {
    let mut req = format!("ws://{addr}/v1/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => Ok(()),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let body = r
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned());
            Err((r.status().as_u16(), body.unwrap_or_default()))
        }
        Err(e) => panic!("connect: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_at_its_session_cap_cannot_open_one_more_session_through_another_edge() {
    let h = Harness::new().await;
    let pg = h.db.connect().await;
    pg.batch_execute(
        "INSERT INTO plans (name, max_ws_sessions, is_default, updated_ms) VALUES ('one', 1, true, 0)",
    )
    .await
    .unwrap();
    let (account, key) = h.account(&demo_wallets(2)).await;
    let (push, bus) = fleet_push(&h).await;
    let (a, addr_a) = edge_on(h.core(), &bus, |_| {}).await;
    let (b, addr_b) = edge_on(h.core(), &bus, |_| {}).await;

    let mut first = connect(addr_a, &key, None).await;
    hello_cursor(&mut first).await;
    let what = "a second session of a one-session plan, through the other edge";
    let seen = closed_with(connect(addr_b, &key, None).await, 1008, WITHIN, what).await;
    assert!(
        !seen.frames.iter().any(|f| f["type"] == "hello"),
        "the other edge opened a session over the cap: {:?}",
        seen.frames
    );

    // The first session closes: its lease goes, and the other edge admits one again.
    first.done.abort();
    drop(first.events);
    let leases = || async {
        pg.query_one(
            "SELECT count(*) FROM session_leases WHERE account_id = $1",
            &[&account],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    assert_eventually!(
        WITHIN,
        leases().await == 0,
        "the closed session's lease stayed"
    );
    let mut again = connect(addr_b, &key, None).await;
    hello_cursor(&mut again).await;
    assert_eq!(leases().await, 1);
    for s in [a, b, push] {
        s.stop().await.unwrap();
    }
    drop_stream(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failed_authentication_budget_holds_across_two_edges() {
    const BURST: usize = 4;
    let h = Harness::new().await;
    let (push, bus) = fleet_push(&h).await;
    let budget = |c: &mut pmw_edge::EdgeConfig| {
        c.edge_ws_auth_failures_per_sec = 1;
        c.edge_ws_auth_failure_burst = BURST as u32;
    };
    let (a, addr_a) = edge_on(h.core(), &bus, budget).await;
    let (b, addr_b) = edge_on(h.core(), &bus, budget).await;

    // One address, guessed keys (of the right shape: looked up), alternating between the edges:
    // each edge alone would let BURST
    // through (2 × BURST in all); the fleet lets BURST through (one more if a second passed).
    let mut admitted = 0;
    let mut refused = Vec::new();
    for i in 0..3 * BURST {
        let addr = if i % 2 == 0 { addr_a } else { addr_b };
        let guess = format!(
            "pmw_{:032x}{:032x}",
            rand::random::<u128>(),
            rand::random::<u128>()
        );
        match upgrade(addr, &guess).await {
            Ok(()) => admitted += 1,
            Err(r) => refused.push(r),
        }
    }
    println!(
        "failed authentications across two edges: {admitted} admitted, {} refused",
        refused.len()
    );
    assert!(
        (1..=BURST + 1).contains(&admitted),
        "{admitted} failed authentications admitted across two edges (budget {BURST}): {refused:?}"
    );
    for (status, body) in &refused {
        assert_eq!(*status, 429, "{body}");
        assert!(
            body.contains("from this address") && !body.contains("API key"),
            "{body}"
        );
    }
    for s in [a, b, push] {
        s.stop().await.unwrap();
    }
    drop_stream(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_on_an_edge_cut_from_postgres_is_closed_within_the_bound() {
    let h = Harness::new().await;
    let (account, key) = h.account(&demo_wallets(2)).await;
    let (push, bus) = fleet_push(&h).await;
    // Only this edge reaches Postgres through the proxy; push and the test do not.
    let (core, proxy) = h.db.behind_proxy().await;
    let (edge, addr) = edge_on(core, &bus, |c| {
        c.edge_index_refresh_ms = 200;
        c.edge_view_stale_ms = 2_000;
    })
    .await;
    let health = format!("http://{addr}/health");
    let status = || async { reqwest::get(&health).await.unwrap().status().as_u16() };
    assert_eq!(status().await, 200);
    let mut c = connect(addr, &key, None).await;
    hello_cursor(&mut c).await;

    proxy.cut();
    let pg = h.db.connect().await;
    let id = key_id(&pg, account).await;
    change_as_api(
        &pg,
        &format!("UPDATE api_keys SET revoked_ms = 1 WHERE id = {id}"),
    )
    .await;
    let what = "the session of a key revoked while its edge cannot see Postgres";
    let seen = closed_with(c, 1013, WITHIN, what).await;
    println!(
        "closed by the edge cut from Postgres: {:?}",
        seen.close_code
    );
    assert_eventually!(
        WITHIN,
        status().await == 503,
        "the stale edge still reports healthy"
    );

    // Back: the edge sees the revocation and is healthy again; the key gets no session.
    proxy.restore();
    assert_eventually!(WITHIN, status().await == 200, "the edge never recovered");
    let what = "the revoked key once the edge sees Postgres again";
    closed_with(connect(addr, &key, None).await, 1008, WITHIN, what).await;
    edge.stop().await.unwrap();
    push.stop().await.unwrap();
    drop_stream(&bus).await;
}

/// A subscription filter that lets nothing through: the replay still stops at the window, by
/// the rows it read, with a `resync`, instead of reading every row since `since`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_replay_counts_the_rows_it_scans_not_only_those_it_sends() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (account, key) = h.account(&wallets).await;
    let cfg = PushConfig {
        push_resume_max_trades: 3,
        ..h.push_config()
    };
    let (push, bound) = h.start_push("push-a", cfg);
    let addr = tokio::time::timeout(WITHIN, bound).await.unwrap().unwrap();
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(4).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let owed = h.expected(&wallets, start);
    assert!(owed.len() > 3, "{owed:?}");
    let pg = h.db.connect().await;
    let nothing = r#"{"min_shares": "1000000000000"}"#;
    change_as_api(
        &pg,
        &format!("UPDATE subscriptions SET filter = '{nothing}' WHERE account_id = {account}"),
    )
    .await;
    // A session's filters are read when it connects: a resume from before the trades.
    let what = "a resume through a filter that keeps every row out, cut at the window";
    let late = closed_with(connect(addr, &key, Some(start)).await, 1008, WITHIN, what).await;
    push.stop().await.unwrap();
    assert!(late.trades.is_empty(), "{:?}", late.trades);
    let resync = late.frames.iter().find(|f| f["type"] == "resync");
    assert!(resync.is_some(), "no resync: {:?}", late.frames);
}
