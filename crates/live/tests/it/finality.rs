//! The finalized watermark: it follows the chain's `finalized` tag (the oracle is the node's
//! own answer, read here over plain JSON-RPC), a reorg above it still retracts, and a reorg
//! below it is refused and counted, with nothing retracted.

use std::time::Duration;

use crate::common::{assert_exactly_emitted, Harness};
use pmw_testkit::{assert_eventually, eventually_every};

const WITHIN: Duration = Duration::from_secs(30);

/// `finalized` trails the head by 4 blocks on anvil 1.7 with 2 slots per epoch.
const ANVIL_FINALITY: &[&str] = &["--slots-in-an-epoch", "2"];

async fn finalized_cursor(h: &Harness) -> Option<(u64, String)> {
    let c = h.db.connect().await;
    c.query_opt(
        "SELECT block_number, block_hash FROM finalized_cursor WHERE id = 1",
        &[],
    )
    .await
    .unwrap()
    .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
}

/// The chain's finalized block (number, hash), asked directly.
async fn chain_finalized(h: &Harness) -> (u64, String) {
    let b: serde_json::Value = h
        .sim
        .rpc()
        .call(
            "eth_getBlockByNumber",
            serde_json::json!(["finalized", false]),
        )
        .await
        .unwrap();
    let n =
        u64::from_str_radix(b["number"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    (n, b["hash"].as_str().unwrap().to_string())
}

/// Wait until the recorded watermark is the chain's finalized block.
async fn wait_finalized_matches_chain(h: &Harness) -> (u64, String) {
    let polled = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let chain = chain_finalized(h).await;
        let ours = finalized_cursor(h).await;
        if ours.as_ref() == Some(&chain) {
            Ok(chain)
        } else {
            Err((ours, chain))
        }
    })
    .await;
    polled.unwrap_or_else(|(ours, chain)| {
        panic!("finalized watermark {ours:?} never reached the chain's {chain:?}")
    })
}

fn fast(mut live: pmw_live::LiveConfig) -> pmw_live::LiveConfig {
    live.live_finalized_poll_ms = 100;
    live
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalized_watermark_follows_the_chain_and_a_reorg_above_it_still_retracts() {
    let h = Harness::with_anvil(ANVIL_FINALITY).await;
    let live = h.start_live(h.core(), fast(h.live_config().await));
    h.sim.run_matches(10).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    let (fin, _) = wait_finalized_matches_chain(&h).await;
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    assert!(fin < head, "finalized {fin} trails the head {head}");

    // A reorg of depth 2 stays above the finalized block: retracted as before.
    let outcome = h.sim.reorg(2).await.unwrap();
    assert!(
        outcome.common_ancestor >= fin,
        "premise: the reorg is above finality"
    );
    assert!(
        !outcome.orphaned.is_empty(),
        "the reorg orphaned some fills"
    );
    h.sim.run_matches(4).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    assert_exactly_emitted(&h.visible().await, &h.sim.canonical());
    let (fin2, _) = wait_finalized_matches_chain(&h).await;
    assert!(fin2 > fin, "the watermark moved on ({fin} → {fin2})");
    live.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_below_the_finalized_watermark_is_refused_and_counted_not_retracted() {
    let h = Harness::with_anvil(ANVIL_FINALITY).await;
    let live = h.start_live(h.core(), fast(h.live_config().await));
    h.sim.run_matches(10).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    let (fin, fin_hash) = wait_finalized_matches_chain(&h).await;
    let before = h.visible().await;
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;

    // anvil lets a reorg reach below its own finalized block; a real Polygon node must not.
    let depth = head - fin + 2;
    let outcome = h.sim.reorg(depth).await.unwrap();
    assert!(
        outcome.common_ancestor < fin,
        "premise: the reorg reaches below finality"
    );
    assert!(
        !outcome.orphaned.is_empty(),
        "premise: finalized fills were orphaned"
    );

    // Live sees the reorg, refuses it and says so in its heartbeat's counters.
    let c = h.db.connect().await;
    let violations = || async {
        let n: Option<i64> = c
            .query_opt(
                "SELECT (state->'stats'->>'finality_violations')::bigint FROM heartbeats WHERE service = 'pmw-live'",
                &[],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        n.unwrap_or(0)
    };
    assert_eventually!(
        WITHIN,
        violations().await >= 1,
        "no finality violation was counted"
    );
    // Nothing was retracted and nothing recorded as a reorg; the watermark did not move back.
    let after = h.visible().await;
    let keys = |v: &[pmw_core::ch::TradeRow]| {
        v.iter()
            .filter(|r| r.block_number <= fin)
            .map(|r| (r.block_number, r.log_index, r.block_hash.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(&after),
        keys(&before),
        "finalized trades stay as they were"
    );
    let reorgs: i64 = c
        .query_one("SELECT count(*) FROM reorgs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(reorgs, 0, "no reorg recorded below finality");
    assert_eq!(finalized_cursor(&h).await, Some((fin, fin_hash)));
    live.stop().await.unwrap();
}
