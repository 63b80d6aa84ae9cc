//! Edge mode's leader side on real NATS JetStream clusters (nats-server 2.9.10): push stores
//! every WebSocket round on the stream before its cursor moves. The oracle is the chain
//! (`eth_getLogs`): the rounds on the stream, read as an edge reads them (contiguous by
//! position, overlap skipped), hold every canonical trade once. Without quorum the cursor
//! waits while ingest and the webhooks go on; a leader deposed on the bus stops without moving its cursor.
//! pmw-edge serves `/v1/ws` from the stream: every owed trade (the simulator's canonical record)
//! live and on resume, and a push failover closes none of its sockets; `final`s after their
//! trades (the chain's `finalized` block decides when); a revoked key's session closes; the
//! kill of the node leading the stream closes no session and loses nothing; an edge whose feed
//! stalls behind push's cursor ends for a restart rather than serve nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_core::Cursor;
use pmw_push::config::PushConfig;
use pmw_session::bus::round::{RoundPart, ALL};
use pmw_session::bus::{stream, Bus, Event, FencedPublisher, Follower};
use pmw_sim::demo_wallets;
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::{assert_eventually, bound_within, PrivateStack, ServiceHandle};

use super::nats::{access, bus_config, keys, shared_bus, TestBus};
use super::WITHIN;
use crate::harness::{
    canonical, change_as_api, closed_with, connect, connect_url, hello_cursor, key_id,
    never_reading, rpc_call, strictly_increasing, Client, Fill, Harness, LEADS_WITHIN,
};

/// The trades an endpoint received, in ledger order (arrival order is not).
fn hooked(hooks: &Receiver) -> Vec<Cursor> {
    let mut v: Vec<Cursor> = hooks
        .hits()
        .iter()
        .map(|h| h.json())
        .filter(|b| b["type"] == "trade")
        .map(|b| b["cursor"].as_str().unwrap().parse().unwrap())
        .collect();
    v.sort();
    v
}

/// Push in edge mode on `bus`; it never hands over for a stall within a test.
pub(super) fn edge_push(h: &Harness, bus: &TestBus) -> PushConfig {
    PushConfig {
        push_nats_urls: Some(bus.urls.join(",")),
        bus_signing_key: Some(keys().0.clone().into()),
        push_nats_user: Some(bus.push.user.clone()),
        push_nats_password: Some(bus.push.password.clone().into()),
        push_nats_ca: bus.push.ca.clone(),
        push_nats_stream: bus.stream.clone(),
        push_nats_prefix: bus.prefix.clone(),
        push_stall_exit_ms: Some(300_000),
        ..h.push_config()
    }
}

/// What an edge would take from the stream: the rounds' trades in order, each once.
#[derive(Debug, Default)]
struct Read {
    fills: Vec<Fill>,
    parts: usize,
    /// Trades at or below the position already read (a part that overlaps an earlier one).
    overlap: usize,
    /// A part starting after the position read so far (a hole in the stream).
    holes: usize,
    through: Option<Cursor>,
}

/// Read every round on `config`'s stream until it has been silent for 3 s.
async fn read_rounds(config: &TestBus) -> Read {
    let as_edge = config.config.clone().with_access(access(&config.edge));
    let bus = Bus::connect(as_edge, "pmw-test").await.expect("bus");
    let mut f = Follower::start(bus, ALL, 0).expect("follow");
    let mut read = Read::default();
    while let Ok(event) = tokio::time::timeout(Duration::from_secs(3), f.next()).await {
        let frame = match event.expect("follow") {
            Event::Frame(frame) => frame,
            Event::Gap(g) => panic!("the stream lost frames after seq {}", g.after),
            Event::Refused(r) => panic!("a message refused: {r:?}"),
        };
        let part = RoundPart::from_body(&frame.body).expect("a round part");
        read.parts += 1;
        if read.through.is_some_and(|t| part.from.cursor > t) {
            read.holes += 1;
        }
        for r in &part.rows {
            let at = Cursor::new(r.row.block_number, r.row.log_index).unwrap();
            if read.through.is_some_and(|t| at <= t) {
                read.overlap += 1;
                continue;
            }
            read.fills.push((
                r.row.block_number,
                r.row.log_index as u64,
                r.row.block_hash.to_lowercase(),
            ));
        }
        read.through = Some(
            read.through
                .map_or(part.through.cursor, |t| t.max(part.through.cursor)),
        );
    }
    read
}

/// Compare what the stream holds with the chain from `start`; print the figures.
async fn judge(h: &Harness, start: u64, read: &Read, what: &str) {
    let owed = canonical(
        &h.anvil.http_url(),
        start,
        &demo_wallets(6)
            .iter()
            .map(|w| w.to_lower_hex())
            .collect::<Vec<_>>(),
    )
    .await;
    let got: BTreeSet<Fill> = read.fills.iter().cloned().collect();
    let duplicated = read.fills.len() - got.len();
    let in_order = read
        .fills
        .windows(2)
        .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1));
    let lost = owed.difference(&got).count();
    let phantom = got.difference(&owed).count();
    println!(
        "{what}: {} parts, owed {} on the stream {} lost {lost} phantom {phantom} duplicated {duplicated} overlap {} holes {} in order {in_order}",
        read.parts,
        owed.len(),
        got.len(),
        read.overlap,
        read.holes,
    );
    assert!(!owed.is_empty());
    assert_eq!((lost, phantom, duplicated, read.holes), (0, 0, 0, 0));
    assert!(in_order, "trades out of ledger order on the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_mode_stores_every_round_on_the_stream() {
    let h = Harness::new().await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(2, Duration::from_millis(100), 30).await;
    h.wait_pushed(WITHIN).await;
    let read = read_rounds(&bus).await;
    push.stop().await.unwrap();
    judge(&h, start, &read, "edge mode").await;
    drop_stream(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_mode_cursor_waits_while_the_broker_cannot_store() {
    let nats = PrivateStack::start_nats();
    let h = Harness::new().await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    let mine = demo_wallets(6);
    let (account, _) = h.account(&mine).await;
    let hooks = Receiver::start(vec![Step::status(204)]).await;
    h.endpoint(account, &hooks.url()).await;
    let mut bus = bus_config(&nats.env);
    bus.give_up = Duration::from_secs(3);
    // No fallback tick: only blocks and the WebSocket lane's rounds wake the webhook lane.
    let cfg = PushConfig {
        push_fallback_ms: 600_000,
        ..edge_push(&h, &bus)
    };
    let (push, bound) = h.start_push("push-a", cfg);
    // Leading (its cursors read) before the first trade: every trade is owed.
    bound_within(bound, LEADS_WITHIN).await;
    h.trade(2, Duration::from_millis(100), 10).await;
    h.wait_pushed(WITHIN).await;
    let before = h.pushed_block().await;

    // Two of three nodes gone: no round can be stored.
    nats.nats_kill(1);
    nats.nats_kill(2);
    h.trade(2, Duration::from_millis(100), 10).await;
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    let c = h.db.connect().await;
    assert_eventually!(
        WITHIN,
        c.query_one("SELECT block_number FROM ingest_cursor WHERE id = 1", &[])
            .await
            .unwrap()
            .get::<_, i64>(0) as u64
            >= head,
        "ingest goes on without the broker"
    );
    // The webhooks do not wait for the broker: every trade's, once.
    let owed = h.expected(
        &mine,
        Cursor {
            block: start,
            log_index: 0,
        },
    );
    let all = pmw_testkit::eventually(WITHIN, || async { hooked(&hooks) == owed }).await;
    if !all {
        let lanes = c
            .query_one(
                "SELECT (SELECT block_number FROM webhook_cursor WHERE slot = 0), \
                 (SELECT count(*) FROM webhook_deliveries)",
                &[],
            )
            .await
            .unwrap();
        panic!(
            "every trade's webhook while the broker is down: got {:?}, owed {owed:?}; webhook cursor at block {:?}, {} deliveries queued",
            hooked(&hooks),
            lanes.get::<_, Option<i64>>(0),
            lanes.get::<_, i64>(1)
        );
    }
    let held = h.pushed_block().await;
    println!("without quorum: push cursor at block {held} (was {before}), ingested to {head}");
    assert_eq!(
        held, before,
        "the cursor moved while the broker could store nothing"
    );

    nats.run(&["up", "nats"]);
    h.wait_pushed(WITHIN).await;
    let read = read_rounds(&bus).await;
    push.stop().await.unwrap();
    judge(&h, start, &read, "after the broker came back").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_deposed_on_the_bus_stops_without_moving_its_cursor() {
    let h = Harness::new().await;
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(2, Duration::from_millis(100), 5).await;
    h.wait_pushed(WITHIN).await;
    let before = h.pushed_block().await;

    // Another leader claims the stream (a successor whose lock the deposed one has not noticed).
    let successor = bus.config.clone().with_access(access(&bus.push));
    let other = Bus::connect(successor, "pmw-test").await.unwrap();
    FencedPublisher::claim(other, 1_000).await.expect("claim");
    h.trade(2, Duration::from_millis(100), 5).await;
    assert_eventually!(WITHIN, push.is_finished(), "the deposed leader goes on");
    let at = h.pushed_block().await;
    println!("deposed on the bus: cursor at block {at} (was {before})");
    assert_eq!(at, before, "a deposed leader moved its cursor");
    let ended = push.join().await;
    assert!(
        ended.is_err(),
        "a deposed leader ends with an error: {ended:?}"
    );
    drop_stream(&bus).await;
}

pub(super) async fn drop_stream(config: &TestBus) {
    if let Ok(bus) = Bus::connect(config.config.clone(), "pmw-test").await {
        let _ = stream::ensure(&bus).await;
        let _ = bus.js.delete_stream(&config.stream).await;
    }
}

/// Run pmw-edge in-process on `bus`; its handle and address once it follows and listens.
pub(super) async fn start_edge(
    h: &Harness,
    bus: &TestBus,
) -> (ServiceHandle, std::net::SocketAddr) {
    start_edge_with(h, bus, |_| {}).await
}

pub(super) async fn start_edge_with(
    h: &Harness,
    bus: &TestBus,
    tweak: impl FnOnce(&mut pmw_edge::EdgeConfig),
) -> (ServiceHandle, std::net::SocketAddr) {
    let mut cfg = pmw_edge::EdgeConfig::with_nats(&bus.urls.join(","), &keys().1);
    tweak(&mut cfg);
    cfg.edge_nats_stream = bus.stream.clone();
    cfg.edge_nats_prefix = bus.prefix.clone();
    cfg.edge_nats_user = Some(bus.edge.user.clone());
    cfg.edge_nats_password = Some(bus.edge.password.clone().into());
    cfg.edge_nats_ca = bus.edge.ca.clone();
    cfg.edge_ws_heartbeat_ms = 1_000;
    let core = h.core();
    let (edge, rx) = ServiceHandle::spawn_bound(move |stop, bound| {
        pmw_edge::run_with(core, cfg, stop, Some(bound))
    });
    (edge, bound_within(rx, LEADS_WITHIN).await)
}

/// An edge that stops getting the frames push stored does not go on serving nothing. Here push's
/// cursor moves with nothing on the stream (as when every follower leg is stuck, or the edge
/// refuses the chain): once the hub has stood still behind push's cursor for the stall bound, the
/// edge ends (transient, exit 75: its supervisor starts it again at the stream's last round) and
/// its sessions are closed 1012 to resume elsewhere. Without the watchdog it served on, silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_whose_feed_stalls_behind_push_ends_for_a_restart() {
    let h = Harness::new().await;
    let (_, key) = h.account(&demo_wallets(6)).await;
    let bus = shared_bus();
    // The stream an edge waits for (push would create it at its first round).
    let b = Bus::connect(bus.config.clone(), "pmw-test")
        .await
        .expect("bus");
    stream::ensure(&b).await.expect("stream");
    let (edge, addr) = start_edge_with(&h, &bus, |c| c.edge_feed_stall_ms = 5_000).await;
    let mut client = connect(addr, &key, None).await;
    hello_cursor(&mut client).await;
    h.db.connect()
        .await
        .execute(
            "INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) \
             VALUES (0, 1000, 0, 1, 0) ON CONFLICT (slot) DO UPDATE SET block_number = 1000",
            &[],
        )
        .await
        .unwrap();
    closed_with(client, 1012, WITHIN, "the stalled edge's session").await;
    let ended = tokio::time::timeout(WITHIN, edge.join())
        .await
        .expect("the stalled edge ended");
    let e = ended.expect_err("a stalled feed ends the edge with an error");
    assert!(e.to_string().contains("feed stalled"), "{e}");
    drop_stream(&bus).await;
}

/// The sessions the edge's heartbeat counts (what `pmwctl status` lists), if it has beaten.
async fn edge_sessions(pg: &tokio_postgres::Client) -> Option<i32> {
    pg.query_opt(
        "SELECT (state->>'sessions')::int FROM heartbeats WHERE service = 'pmw-edge'",
        &[],
    )
    .await
    .unwrap()
    .map(|r| r.get(0))
}

/// The trades `c` receives until it holds `want` of them (or the wait ends).
pub(super) async fn trades_until(c: &mut Client, want: usize) -> Vec<Cursor> {
    let mut got = Vec::new();
    while got.len() < want {
        match tokio::time::timeout(WITHIN, c.events.recv()).await {
            Ok(Some(v)) if v["type"] == "trade" => {
                got.push(v["cursor"].as_str().unwrap().parse().unwrap())
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    got
}

/// The slow-consumer policy at an edge, as at push: a client that never reads fills its bounded
/// queue (the connection's small kernel send buffer hides nothing) and is closed; the others get
/// everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_closes_a_slow_consumer_and_others_are_unaffected() {
    let h = Harness::new().await;
    let mine = demo_wallets(6);
    let (_, key) = h.account(&mine).await;
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    // Far smaller than the whole run. Blocks come paced, so no round is a burst the fast
    // client must take at once (an edge dispatches a catch-up's parts back to back, its
    // follower holding them read ahead).
    let (edge, addr) = start_edge_with(&h, &bus, |c| c.edge_ws_queue = 256).await;
    let mut slow = never_reading(addr, &key).await;
    let mut fast = connect(addr, &key, None).await;
    let start = hello_cursor(&mut fast).await;
    h.trade(2, Duration::from_millis(20), 300).await;
    h.wait_pushed(WITHIN).await;
    let owed = h.expected(&mine, start);
    let got = trades_until(&mut fast, owed.len()).await;
    assert_eq!(got, owed, "the fast client got everything");
    let pg = h.db.connect().await;
    assert_eventually!(
        WITHIN,
        edge_sessions(&pg).await == Some(1),
        "the slow session is gone from the edge's heartbeat"
    );
    let mut rest = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut slow, &mut rest);
    let closed = tokio::time::timeout(WITHIN, read).await;
    assert!(
        matches!(closed, Ok(Ok(_)) | Ok(Err(_))),
        "the slow consumer's socket was closed"
    );
    edge.stop().await.unwrap();
    push.stop().await.unwrap();
    drop_stream(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_serves_every_trade_and_a_push_failover_closes_none_of_its_sockets() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let mine = &wallets[..3];
    let (_, key) = h.account(mine).await;
    let bus = shared_bus();
    let (push_a, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(1, Duration::from_millis(50), 2).await;
    h.wait_pushed(WITHIN).await;
    let (edge, addr) = start_edge(&h, &bus).await;
    let mut live = connect(addr, &key, None).await;
    let from = hello_cursor(&mut live).await;

    h.trade(2, Duration::from_millis(100), 20).await;
    h.wait_pushed(WITHIN).await;
    // A client resuming from where the first one started: replay, then live, on the edge.
    let mut resumed = connect(addr, &key, Some(from)).await;
    // The push leader goes (a deploy: it closes its own sockets) and another takes over.
    push_a.stop().await.unwrap();
    let (push_b, _) = h.start_push("push-b", edge_push(&h, &bus));
    h.trade(2, Duration::from_millis(100), 20).await;
    h.wait_pushed(WITHIN).await;

    let owed = h.expected(mine, from);
    let got = trades_until(&mut live, owed.len()).await;
    let again = trades_until(&mut resumed, owed.len()).await;
    let (closed_live, closed_resumed) = (live.done.is_finished(), resumed.done.is_finished());
    println!(
        "edge: owed {} live {} resumed {} (live socket closed: {closed_live}, resumed: {closed_resumed})",
        owed.len(),
        got.len(),
        again.len()
    );
    assert!(
        !closed_live && !closed_resumed,
        "a push failover closed an edge socket"
    );
    // The edge's heartbeat (what `pmwctl status` lists) counts its two sessions.
    let pg = h.db.connect().await;
    assert_eventually!(
        WITHIN,
        edge_sessions(&pg).await == Some(2),
        "the edge's heartbeat"
    );
    assert!(strictly_increasing(&got) && strictly_increasing(&again));
    assert_eq!(got, owed, "what the live client got on the edge");
    assert_eq!(again, owed, "what the resumed client got on the edge");
    edge.stop().await.unwrap();
    push_b.stop().await.unwrap();
    drop_stream(&bus).await;
}

/// The chain's finalized block number, asked directly.
async fn chain_finalized(rpc: &str) -> u64 {
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
        "params": ["finalized", false]});
    let v = rpc_call(rpc, &req).await;
    u64::from_str_radix(
        v["result"]["number"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap()
}

/// Frames of `c` until it holds `want` of type `kind` (or the wait ends): (type, cursor) in order.
async fn frames_until(c: &mut Client, kind: &str, want: usize) -> Vec<(String, Cursor)> {
    let mut got = Vec::new();
    while got.iter().filter(|(k, _)| k == kind).count() < want {
        match tokio::time::timeout(WITHIN, c.events.recv()).await {
            Ok(Some(v)) if v["type"] == "trade" || v["type"] == "final" => got.push((
                v["type"].as_str().unwrap().to_string(),
                v["cursor"].as_str().unwrap().parse().unwrap(),
            )),
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_serves_finals_after_their_trades() {
    let h = Harness::with_anvil(&["--slots-in-an-epoch", "2"]).await;
    let wallets = demo_wallets(6);
    let mine = &wallets[..3];
    let (_, key) = h.account(mine).await;
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(1, Duration::from_millis(50), 2).await;
    h.wait_pushed(WITHIN).await;
    let (edge, addr) = start_edge(&h, &bus).await;
    let url = |q: &str| format!("ws://{addr}/v1/ws{q}");
    let mut both = connect_url(&url("?events=trade,final"), Some(&key)).await;
    let mut finals = connect_url(&url("?events=final"), Some(&key)).await;
    let from = hello_cursor(&mut both).await;
    // A final-only session starts where the final stream stands (its own positions).
    let finals_from = hello_cursor(&mut finals).await;

    h.trade(2, Duration::from_millis(200), 12).await;
    let last = h.sim.rpc().latest_block().await.unwrap().number.0;
    while chain_finalized(&h.anvil.http_url()).await < last {
        h.sim.rpc().mine().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let owed = h.expected(mine, from);
    let seen = frames_until(&mut both, "final", owed.len()).await;
    let owed_finals = h.expected(mine, finals_from);
    let only = frames_until(&mut finals, "final", owed_finals.len()).await;
    let of = |v: &[(String, Cursor)], kind: &str| -> Vec<Cursor> {
        v.iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, c)| *c)
            .collect()
    };
    println!(
        "edge finals: owed {} trade,final: {} trades {} finals; final-only: {} finals {} trades",
        owed.len(),
        of(&seen, "trade").len(),
        of(&seen, "final").len(),
        of(&only, "final").len(),
        of(&only, "trade").len()
    );
    assert!(owed.len() >= 6, "premise: enough fills ({})", owed.len());
    assert_eq!(of(&seen, "trade"), owed);
    let mut final_cursors = of(&seen, "final");
    final_cursors.sort();
    assert_eq!(final_cursors, owed, "one final per fill (trade,final)");
    for c in &owed {
        let t = seen.iter().position(|(k, x)| k == "trade" && x == c);
        let f = seen.iter().position(|(k, x)| k == "final" && x == c);
        assert!(t < f, "the final of {c} came before its trade");
    }
    assert_eq!(
        of(&only, "final"),
        owed_finals,
        "a final-only session: every final after its start, in order"
    );
    assert!(of(&only, "trade").is_empty());
    edge.stop().await.unwrap();
    push.stop().await.unwrap();
    drop_stream(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_closes_a_revoked_keys_session_and_survives_the_kill_of_the_streams_leader() {
    let nats = PrivateStack::start_nats();
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let mine = &wallets[..3];
    let (account, key) = h.account(mine).await;
    let (_, other_key) = h.account(mine).await;
    let bus = bus_config(&nats.env);
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(1, Duration::from_millis(50), 2).await;
    h.wait_pushed(WITHIN).await;
    let (edge, addr) = start_edge(&h, &bus).await;
    let mut c = connect(addr, &other_key, None).await;
    let from = hello_cursor(&mut c).await;

    // Revocation: the key's session on the edge closes (1008).
    let mut doomed = connect(addr, &key, None).await;
    hello_cursor(&mut doomed).await;
    let pg = h.db.connect().await;
    let key_id = key_id(&pg, account).await;
    change_as_api(
        &pg,
        &format!("UPDATE api_keys SET revoked_ms = 1 WHERE id = {key_id}"),
    )
    .await;
    closed_with(
        doomed,
        1008,
        WITHIN,
        "the revoked key's session on the edge",
    )
    .await;

    // The node leading the stream dies while trades flow; it comes back later.
    h.trade(2, Duration::from_millis(100), 10).await;
    let js = Bus::connect(bus.config.clone(), "pmw-test").await.unwrap();
    let info = js
        .js
        .get_stream(&bus.stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    let leader: usize = info
        .cluster
        .and_then(|c| c.leader)
        .and_then(|l| l.strip_prefix("pmw-n").and_then(|n| n.parse().ok()))
        .expect("a stream leader");
    nats.nats_kill(leader);
    h.trade(2, Duration::from_millis(100), 10).await;
    h.wait_pushed(WITHIN).await;
    nats.run(&["up", "nats"]);
    h.trade(2, Duration::from_millis(100), 5).await;
    h.wait_pushed(WITHIN).await;

    let owed = h.expected(mine, from);
    let got = trades_until(&mut c, owed.len()).await;
    println!(
        "edge through the kill of stream leader n{leader}: owed {} got {} (socket closed: {})",
        owed.len(),
        got.len(),
        c.done.is_finished()
    );
    assert!(!c.done.is_finished(), "the edge closed a session");
    assert_eq!(got, owed);
    edge.stop().await.unwrap();
    push.stop().await.unwrap();
}
