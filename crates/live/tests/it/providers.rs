//! Several RPC providers in front of one real anvil, each through its own breakable proxy: a
//! provider cut for 30 s, one delayed 200 ms, one whose HTTP side lags (answers "block not
//! found" for the newest blocks) and two seeing a reorg at different times. Every fill is
//! ingested exactly once, no block is missed, heads are taken from whoever delivers first.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{assert_exactly_emitted, p50_p99, Harness};
use pmw_core::ch::{latency, IngestLatencyRow, Window};
use pmw_live::chain::{self, SeenHead};
use pmw_live::LiveConfig;
use pmw_sim::anvil::Anvil;
use pmw_sim::RunConfig;
use pmw_testkit::{assert_eventually, RpcProxy, TcpProxy};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) const CATCH_UP: Duration = Duration::from_secs(60);

/// Two providers `a` and `b`, each a TCP proxy to the harness's anvil (WebSocket and HTTP).
struct Two {
    a: TcpProxy,
    b: TcpProxy,
}

impl Two {
    async fn start(h: &Harness) -> Two {
        let anvil = format!("127.0.0.1:{}", h.anvil.port()).parse().unwrap();
        Two {
            a: TcpProxy::start(anvil).await,
            b: TcpProxy::start(anvil).await,
        }
    }

    fn list(&self) -> String {
        let (a, b) = (self.a.addr, self.b.addr);
        format!("a=ws://{a}|http://{a} b=ws://{b}|http://{b}")
    }
}

pub(crate) async fn live_with(h: &Harness, providers: String) -> LiveConfig {
    LiveConfig {
        live_rpc_providers: Some(providers),
        ..h.live_config().await
    }
}

/// Blocks paced `every` apart, one match each, `count` of them.
pub(crate) fn paced(
    h: &Harness,
    every: Duration,
    count: u64,
) -> tokio::task::JoinHandle<anyhow::Result<u64>> {
    h.sim.spawn(
        RunConfig {
            matches_per_block: 1,
            interval: every,
            count: Some(count),
            duration: None,
        },
        CancellationToken::new(),
    )
}

async fn latency_rows(h: &Harness) -> Vec<IngestLatencyRow> {
    let all = Window {
        from_ms: 0,
        to_ms: i64::MAX,
    };
    latency::ingest_in_window(&h.db.ch, all).await.unwrap()
}

/// The live leader's per-provider figures from its heartbeat, by name.
pub(crate) async fn providers_beat(h: &Harness) -> BTreeMap<String, Value> {
    let c = h.db.connect().await;
    let row = c
        .query_opt(
            "SELECT state FROM heartbeats WHERE service = 'pmw-live' AND state ? 'providers'",
            &[],
        )
        .await
        .unwrap();
    let state: Value = row.map_or(Value::Null, |r| r.get(0));
    state["providers"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| (p["name"].as_str().unwrap_or("").to_string(), p.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn reorgs(h: &Harness) -> i64 {
    let c = h.db.connect().await;
    c.query_one("SELECT count(*) FROM reorgs WHERE cause = 'reorg'", &[])
        .await
        .unwrap()
        .get(0)
}

/// No block is missing between the first and last ingested, none twice.
fn assert_contiguous(rows: &[IngestLatencyRow]) {
    let mut numbers: Vec<u64> = rows.iter().map(|r| r.block_number).collect();
    numbers.sort_unstable();
    let (first, last) = (numbers[0], numbers[numbers.len() - 1]);
    assert_eq!(
        numbers,
        (first..=last).collect::<Vec<_>>(),
        "every block from {first} to {last} ingested once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_provider_cut_for_30_s_misses_no_block() {
    let h = Harness::new().await;
    let two = Two::start(&h).await;
    let live = h.start_live(h.core(), live_with(&h, two.list()).await);
    let run = paced(&h, Duration::from_millis(300), 120);
    tokio::time::sleep(Duration::from_secs(3)).await;
    two.b.cut();
    assert_eventually!(
        Duration::from_secs(10),
        providers_beat(&h)
            .await
            .get("b")
            .is_some_and(|b| b["standing"] != "healthy"),
        "the cut provider is demoted"
    );
    tokio::time::sleep(Duration::from_secs(27)).await;
    two.b.restore();
    run.await.unwrap().unwrap();
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    let rows = latency_rows(&h).await;
    assert_contiguous(&rows);
    let backfilled: Vec<u64> = rows
        .iter()
        .filter(|r| r.backfilled == 1)
        .map(|r| r.block_number)
        .collect();
    assert!(
        backfilled.is_empty(),
        "every block was seen live through the healthy provider; backfilled: {backfilled:?}"
    );
    assert_eventually!(
        Duration::from_secs(20),
        providers_beat(&h)
            .await
            .get("b")
            .is_some_and(|b| b["standing"] == "healthy"),
        "the restored provider is promoted again"
    );
    let (s50, s99) = p50_p99(rows.iter().map(|r| r.t_stored_ms - r.t_detect_ms).collect());
    let beat = providers_beat(&h).await;
    println!(
        "provider b cut 30 s: {} blocks, none backfilled, detect→stored p50 {s50} ms p99 {s99} ms; a {}, b {}",
        rows.len(),
        beat["a"],
        beat["b"]
    );
    live.stop().await.unwrap();
}

/// Arrival times (ms) of each head hash on a subscription through `ws_url`.
fn record_heads(ws_url: String, stop: CancellationToken) -> mpsc::Receiver<(usize, SeenHead)> {
    let (tx, rx) = mpsc::channel(4096);
    tokio::spawn(async move {
        tokio::select! {
            _ = chain::follow_heads(&ws_url, 0, "test", &tx, Duration::from_secs(60), || {}) => {}
            _ = stop.cancelled() => {}
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_delayed_200_ms_loses_the_race_and_detect_follows_the_faster() {
    let h = Harness::new().await;
    let two = Two::start(&h).await;
    two.b.set_delay(Duration::from_millis(200));
    let stop = CancellationToken::new();
    let mut slow = record_heads(format!("ws://{}", two.b.addr), stop.clone());
    let live = h.start_live(h.core(), live_with(&h, two.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(&h, Duration::from_millis(300), 40)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    stop.cancel();
    let mut via_b = BTreeMap::new();
    while let Ok((_, s)) = slow.try_recv() {
        via_b.insert(s.head.hash_hex(), s.t_detect_ms.0);
    }
    let rows = latency_rows(&h).await;
    let live_rows: Vec<_> = rows.iter().filter(|r| r.backfilled == 0).collect();
    // Detected at least 100 ms before the slow provider delivered the same head: taken from a.
    let ahead = live_rows
        .iter()
        .filter(|r| {
            via_b
                .get(&r.block_hash)
                .is_some_and(|b| r.t_detect_ms + 100 <= *b)
        })
        .count();
    assert!(
        live_rows.len() >= 35,
        "blocks seen live: {}",
        live_rows.len()
    );
    assert!(
        ahead * 10 >= live_rows.len() * 9,
        "t_detect_ms follows the faster provider: {ahead} of {} blocks",
        live_rows.len()
    );
    let beat = providers_beat(&h).await;
    let (won_a, won_b) = (
        beat["a"]["won"].as_u64().unwrap(),
        beat["b"]["won"].as_u64().unwrap(),
    );
    assert!(
        won_a >= 9 * (won_a + won_b) / 10,
        "a wins ~every head: a {won_a}, b {won_b}"
    );
    assert!(
        beat["b"]["lag_p50_ms"].as_i64().unwrap() >= 100,
        "b is seen behind the winner: {}",
        beat["b"]
    );
    println!("b delayed 200 ms: a {}, b {}", beat["a"], beat["b"]);
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_answering_not_found_for_the_newest_blocks_causes_no_false_reorg_or_gap() {
    lagging_http(false, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_answering_empty_logs_for_blocks_it_lacks_loses_no_fill() {
    lagging_http(true, Some(1)).await;
}

/// A provider whose subscription is the fastest but whose HTTP side lags 3 blocks: "unknown
/// block" for their logs, or (`empty_logs`) `[]`. The audit is off: nothing repairs a miss.
/// With a quorum of 1 one other provider; with the default quorum (2) two others, so a block's
/// logs still have two providers' word while the lagging one lacks it.
async fn lagging_http(empty_logs: bool, quorum: Option<usize>) {
    let h = Harness::new().await;
    let anvil = format!("127.0.0.1:{}", h.anvil.port()).parse().unwrap();
    let ws = TcpProxy::start(anvil).await;
    let lagging = RpcProxy::start(&h.anvil.http_url()).await;
    lagging.hide_newest(3);
    lagging.empty_logs(empty_logs);
    // The lagging node's subscription is the fastest: it announces (and leads) every head,
    // so its HTTP side is asked first for every block, and does not have the newest ones.
    let b = TcpProxy::start(anvil).await;
    b.set_delay(Duration::from_millis(50));
    let c = TcpProxy::start(anvil).await;
    c.set_delay(Duration::from_millis(50));
    let mut list = format!(
        "lagging=ws://{}|{} b=ws://{}|http://{}",
        ws.addr,
        lagging.url(),
        b.addr,
        b.addr
    );
    if quorum.is_none() {
        list.push_str(&format!(" c=ws://{c}|http://{c}", c = c.addr));
    }
    let live = LiveConfig {
        live_audit_enabled: false,
        live_rpc_quorum: quorum,
        ..live_with(&h, list).await
    };
    let live = h.start_live(h.core(), live);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(&h, Duration::from_millis(300), 30)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert!(
        lagging.hidden() > 0,
        "the lagging provider was asked for the newest blocks"
    );
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    assert_eq!(
        reorgs(&h).await,
        0,
        "a \"not found\" is never read as a reorg"
    );
    let rows = latency_rows(&h).await;
    assert_contiguous(&rows);
    let beat = providers_beat(&h).await;
    let (not_found, heads) = (
        beat["lagging"]["not_found"].as_u64().unwrap(),
        beat["lagging"]["heads"].as_u64().unwrap(),
    );
    // Asked first until it missed 3 blocks, then only as a probe every 10 blocks.
    assert!(
        not_found > 0 && not_found * 2 < heads,
        "{}",
        beat["lagging"]
    );
    println!(
        "lagging HTTP (empty logs {empty_logs}): lagging {}, b {}",
        beat["lagging"], beat["b"]
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_seen_through_one_provider_first_is_followed_once_and_matches_the_chain() {
    let h = Harness::new().await;
    let two = Two::start(&h).await;
    // b sees everything, the old branch included, a second after a does.
    two.b.set_delay(Duration::from_millis(1_000));
    let live = h.start_live(h.core(), live_with(&h, two.list()).await);
    h.sim.run_matches(6).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    let outcome = h.sim.reorg(2).await.unwrap();
    assert!(
        !outcome.orphaned.is_empty(),
        "the reorg orphaned some fills"
    );
    h.sim.run_matches(1).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    // Let b's late view of both branches arrive, then more blocks on the new one.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    assert_eq!(
        reorgs(&h).await,
        1,
        "one reorg, not a flap between branches"
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_http_hangs_is_hedged_around() {
    let h = Harness::new().await;
    let anvil = format!("127.0.0.1:{}", h.anvil.port()).parse().unwrap();
    // a announces first (direct subscription), its HTTP goes through a proxy that will hang.
    // b and c: with the default quorum (2), a block's logs need two providers' word.
    let a_http = TcpProxy::start(anvil).await;
    let b = TcpProxy::start(anvil).await;
    b.set_delay(Duration::from_millis(50));
    let c = TcpProxy::start(anvil).await;
    c.set_delay(Duration::from_millis(50));
    let list = format!(
        "a={}|http://{} b=ws://{b}|http://{b} c=ws://{c}|http://{c}",
        h.anvil.ws_url(),
        a_http.addr,
        b = b.addr,
        c = c.addr,
    );
    let live = h.start_live(h.core(), live_with(&h, list).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.sim.run_matches(5).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    a_http.freeze();
    // Shorter than the 10 s call timeout: only hedging gets these blocks past the hung a.
    paced(&h, Duration::from_millis(300), 15)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(Duration::from_secs(8)).await;
    a_http.thaw();
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    assert_contiguous(&latency_rows(&h).await);
    let beat = providers_beat(&h).await;
    assert!(
        beat["a"]["hedges"].as_u64().unwrap() >= 5,
        "calls to the hung provider were hedged: {}",
        beat["a"]
    );
    println!("a's HTTP hung: a {}, b {}", beat["a"], beat["b"]);
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_on_another_branch_one_block_ahead_never_makes_ingest_flap() {
    let h = Harness::new().await;
    h.sim.run_matches(1).await.unwrap();
    let fork_at = h.sim.rpc().latest_block().await.unwrap().number.0;
    // A second node on its own branch from `fork_at` (an anvil forked there): real headers,
    // real parent hashes, never the simulator's chain.
    let fork = fork_at.to_string();
    let other = Anvil::spawn_with(&[
        "--fork-url",
        &h.anvil.http_url(),
        "--fork-block-number",
        &fork,
    ])
    .await
    .unwrap();
    let other_rpc = pmw_sim::rpc::Rpc::new(&other.http_url()).unwrap();
    let list = format!(
        "main={}|{} other={}|{}",
        h.anvil.ws_url(),
        h.anvil.http_url(),
        other.ws_url(),
        other.http_url()
    );
    // Two providers on two branches never agree: with the default quorum (2) nothing is
    // ingested; this is the branch rule of a quorum of 1.
    let live = LiveConfig {
        live_rpc_quorum: Some(1),
        ..live_with(&h, list).await
    };
    let live = h.start_live(h.core(), live);
    h.sim.run_matches(2).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    // The other branch catches up, then reaches every height first: one block longer, then
    // equal, twenty times over.
    for _ in 0..2 {
        other_rpc.mine().await.unwrap();
    }
    for _ in 0..20 {
        other_rpc.mine().await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        h.sim.run_matches(1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    h.wait_caught_up(CATCH_UP).await;
    let other_head = other_rpc.block_number().await.unwrap();
    let main_head = h.sim.rpc().block_number().await.unwrap();
    assert_eq!(other_head, main_head, "the branches ended equally long");
    // Live started above the fork point (the fills below it were mined before).
    let canonical: Vec<_> = h
        .sim
        .canonical()
        .into_iter()
        .filter(|e| e.block_number > fork_at)
        .collect();
    assert_exactly_emitted(&h.visible().await, &canonical);
    assert_eq!(reorgs(&h).await, 0, "ingest never left the leader's branch");
    let beat = providers_beat(&h).await;
    println!(
        "lockstep branches: main {}, other {}",
        beat["main"], beat["other"]
    );
    live.stop().await.unwrap();
}
