//! No lone provider makes a fact: providers in front of one real anvil, one of them a testkit
//! RPC proxy that lies (a block's hash and logs of its own, a fill added to a block all agree
//! on, an inflated head, `finalized` at the
//! head, another chain id). Not one fill of a lie reaches the ledger (checked against the
//! simulator's record and against anvil's own `eth_getLogs`), ingest goes on while a quorum of
//! honest providers agrees and waits (reported) while none does.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{assert_exactly_emitted, Harness};
use crate::providers::{live_with, paced, providers_beat, CATCH_UP};
use pmw_core::ch::TradeRow;
use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_core::trade::Allowlist;
use pmw_core::ServiceError;
use pmw_live::chain::Chain;
use pmw_testkit::{assert_eventually, RpcProxy, TcpProxy};
use serde_json::Value;

/// A lying provider and `honest` providers through TCP proxies to the harness's anvil, each
/// delayed 100 ms: the liar announces first and leads (a hijacked provider can be the fastest).
struct Providers {
    liar: RpcProxy,
    honest: Vec<TcpProxy>,
}

impl Providers {
    async fn start(h: &Harness, honest: usize) -> Providers {
        let anvil = format!("127.0.0.1:{}", h.anvil.port()).parse().unwrap();
        let mut list = Vec::new();
        for _ in 0..honest {
            let p = TcpProxy::start(anvil).await;
            p.set_delay(Duration::from_millis(100));
            list.push(p);
        }
        Providers {
            liar: RpcProxy::start(&h.anvil.http_url()).await,
            honest: list,
        }
    }

    fn list(&self) -> String {
        let mut out = format!("liar={}|{}", self.liar.ws_url(), self.liar.url());
        for (i, p) in self.honest.iter().enumerate() {
            out.push_str(&format!(" h{i}=ws://{a}|http://{a}", a = p.addr));
        }
        out
    }
}

/// The fills anvil itself holds from block `from` on (its own `eth_getLogs`, no proxy): the
/// oracle, as (block, log index, block hash).
async fn chain_fills(h: &Harness, from: u64) -> BTreeSet<(u64, u32, String)> {
    let chain = Chain::new(&h.anvil.http_url()).unwrap();
    let to = h.sim.rpc().block_number().await.unwrap();
    let addresses: Vec<_> = Allowlist::polymarket().addresses().collect();
    chain
        .logs_in_range(from, to, &addresses, &ORDER_FILLED_TOPICS)
        .await
        .unwrap()
        .into_iter()
        .map(|l| {
            (
                l.block_number,
                l.log_index,
                pmw_live::chain::hex32(&l.block_hash),
            )
        })
        .collect()
}

fn ledger_fills(visible: &[TradeRow]) -> BTreeSet<(u64, u32, String)> {
    visible
        .iter()
        .map(|r| (r.block_number, r.log_index, r.block_hash.clone()))
        .collect()
}

/// No visible fill carries the liar's hash, and the ledger is exactly what anvil holds up to
/// the ingest watermark.
async fn assert_no_lie_landed(h: &Harness, from: u64) {
    let cursor = h.cursor().await.map_or(0, |c| c.0);
    let visible = h.visible().await;
    let fake: Vec<_> = visible
        .iter()
        .filter(|r| r.block_hash.ends_with("0badf00d") || r.log_index >= 256)
        .map(|r| (r.block_number, r.log_index))
        .collect();
    assert!(fake.is_empty(), "fills of the lie in the ledger: {fake:?}");
    let chain: BTreeSet<_> = chain_fills(h, from)
        .await
        .into_iter()
        .filter(|f| f.0 <= cursor)
        .collect();
    assert_eq!(
        ledger_fills(&visible),
        chain,
        "the ledger is what anvil's own eth_getLogs holds"
    );
}

async fn quorum_beat(h: &Harness) -> Value {
    let c = h.db.connect().await;
    c.query_opt(
        "SELECT state->'rpc_quorum' FROM heartbeats WHERE service = 'pmw-live' AND state ? 'providers'",
        &[],
    )
    .await
    .unwrap()
    .and_then(|r| r.get::<_, Option<Value>>(0))
    .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_lying_about_a_block_lands_no_fill_while_two_honest_ones_agree() {
    let h = Harness::new().await;
    let p = Providers::start(&h, 2).await;
    let from = h.sim.rpc().block_number().await.unwrap() + 1;
    p.liar.lie_about_block(Some(from + 2));
    trades_land_but_no_lie(&h, &p, from).await;
}

/// The liar agrees on every block's hash but adds a fill to one block's logs: the hash quorum
/// lets it through, the logs' quorum does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_adding_a_fill_to_a_block_all_agree_on_lands_no_fill() {
    let h = Harness::new().await;
    let p = Providers::start(&h, 2).await;
    let from = h.sim.rpc().block_number().await.unwrap() + 1;
    p.liar.forge_logs(Some(from + 2));
    trades_land_but_no_lie(&h, &p, from).await;
}

/// Live on the three providers while the simulator trades: the liar told its lie, yet the
/// ledger is exactly what anvil holds.
async fn trades_land_but_no_lie(h: &Harness, p: &Providers, from: u64) {
    let live = h.start_live(h.core(), live_with(h, p.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(h, Duration::from_millis(300), 8)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert!(p.liar.lied() > 0, "the liar told its lie");
    assert_no_lie_landed(h, from).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_providers_a_lie_stalls_ingest_reported_until_they_agree_again() {
    let h = Harness::new().await;
    let p = Providers::start(&h, 1).await;
    let from = h.sim.rpc().block_number().await.unwrap() + 1;
    let lie_at = from + 2;
    p.liar.lie_about_block(Some(lie_at));
    let live = h.start_live(h.core(), live_with(&h, p.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(&h, Duration::from_millis(300), 6)
        .await
        .unwrap()
        .unwrap();
    assert_eventually!(
        Duration::from_secs(20),
        h.cursor().await.is_some_and(|c| c.0 >= lie_at - 1),
        "ingest reaches the block below the lie"
    );
    // Never ingested from one provider's word: the watermark stays below the block.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_no_lie_landed(&h, from).await;
    let cursor = h.cursor().await.map(|c| c.0);
    assert_eq!(cursor, Some(lie_at - 1), "ingest waits below the block");
    assert_eventually!(
        Duration::from_secs(10),
        quorum_beat(&h).await["waiting"]["block"] == lie_at,
        "the wait for a quorum on the lied-about block is reported"
    );
    let beat = quorum_beat(&h).await;
    assert_eq!(
        (beat["quorum"].as_u64(), beat["providers"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(beat["waits"].as_u64().unwrap() > 0, "{beat}");
    // The provider tells the truth again: a quorum agrees, ingest goes on.
    p.liar.lie_about_block(None);
    h.sim.run_matches(1).await.unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_no_lie_landed(&h, from).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    assert_eventually!(
        Duration::from_secs(10),
        quorum_beat(&h).await["waiting"].is_null(),
        "the wait is over"
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_inflating_its_head_neither_leads_nor_demotes_the_honest_ones() {
    let h = Harness::new().await;
    let p = Providers::start(&h, 2).await;
    p.liar.inflate_head(1_000);
    let live = h.start_live(h.core(), live_with(&h, p.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(&h, Duration::from_millis(300), 10)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_eventually!(
        Duration::from_secs(10),
        {
            let beat = providers_beat(&h).await;
            beat.get("liar").is_some_and(|l| l["standing"] == "ahead")
                && beat.get("h0").is_some_and(|b| b["standing"] == "healthy")
                && beat.get("h1").is_some_and(|b| b["standing"] == "healthy")
        },
        "the inflated head is the one out of line"
    );
    let beat = providers_beat(&h).await;
    assert_eq!(beat["liar"]["leader"], false, "{beat:?}");
    assert_eq!(beat["h0"]["demotions"], 0, "{beat:?}");
    assert_eq!(beat["h1"]["demotions"], 0, "{beat:?}");
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    // Ingest's head is the chain's, not the inflated one.
    let c = h.db.connect().await;
    let head: Option<i64> = c
        .query_one(
            "SELECT (state->>'head')::bigint FROM heartbeats WHERE service = 'pmw-live' AND state ? 'providers'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let chain_head = h.sim.rpc().block_number().await.unwrap() as i64;
    assert!(
        head.is_some_and(|n| n <= chain_head),
        "ingest head {head:?}, chain {chain_head}"
    );
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalized_is_what_a_quorum_reports_not_the_highest() {
    // `finalized` trails the head by 4 blocks; the liar calls the head finalized.
    let h = Harness::with_anvil(&["--slots-in-an-epoch", "2"]).await;
    let p = Providers::start(&h, 2).await;
    p.liar.finalize_latest(true);
    let live = h.start_live(h.core(), live_with(&h, p.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let anvil = Chain::new(&h.anvil.http_url()).unwrap();
    let c = h.db.connect().await;
    let watermark = || async {
        c.query_opt(
            "SELECT block_number FROM finalized_cursor WHERE id = 1",
            &[],
        )
        .await
        .unwrap()
        .map_or(0, |r| r.get::<_, i64>(0) as u64)
    };
    let mut seen = Vec::new();
    for _ in 0..12 {
        h.sim.run_matches(1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let w = watermark().await;
        let honest = anvil.finalized().await.unwrap().map_or(0, |f| f.number);
        seen.push((w, honest));
        assert!(
            w <= honest,
            "finalized watermark {w} above the chain's finalized {honest}"
        );
    }
    h.wait_caught_up(CATCH_UP).await;
    let honest = anvil.finalized().await.unwrap().unwrap().number;
    assert_eventually!(
        Duration::from_secs(10),
        watermark().await == honest,
        "the watermark reaches the finalized block the honest quorum reports"
    );
    assert!(p.liar.lied() > 0);
    println!("finalized watermark vs chain's: {seen:?}");
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_on_another_chain_is_not_used_and_a_single_one_stops_startup() {
    let h = Harness::new().await;
    let p = Providers::start(&h, 2).await;
    p.liar.report_chain_id(Some(1));
    // It also lies about a block: were it used, its fill would land.
    let from = h.sim.rpc().block_number().await.unwrap() + 1;
    p.liar.lie_about_block(Some(from + 1));
    let live = h.start_live(h.core(), live_with(&h, p.list()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    paced(&h, Duration::from_millis(300), 5)
        .await
        .unwrap()
        .unwrap();
    h.wait_caught_up(CATCH_UP).await;
    assert_no_lie_landed(&h, from).await;
    let beat = providers_beat(&h).await;
    assert_eq!(beat["liar"]["standing"], "wrong_chain", "{beat:?}");
    assert_eq!(beat["liar"]["heads"], 0, "{beat:?}");
    live.stop().await.unwrap();

    // Alone, it stops startup: a configuration error (exit 78).
    let only = format!("only={}|{}", p.liar.ws_url(), p.liar.url());
    let alone = h.start_live(h.core(), live_with(&h, only).await);
    let ended = tokio::time::timeout(Duration::from_secs(20), alone.join())
        .await
        .expect("live stopped at startup");
    match ended {
        Err(ServiceError::Config(e)) => assert!(e.contains("chain 1"), "{e}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}
