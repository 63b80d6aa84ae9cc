//! Bounded catch-up from ClickHouse: a leader behind the hot ledger's window (simulated by
//! raising the hot ledger's floor above the head, so every block is history) reads span by span,
//! moves past empty blocks only when every block returned its recorded trade count, and never
//! past a block that came back short (simulated by raising one block's recorded count: the rows
//! "missing" from ClickHouse must hold the cursor until they are there). Within the hot window
//! the ledger is read from Postgres, committed with the watermark: no count check is needed.

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_sim::demo_wallets;
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::{assert_eventually, eventually_every, observe_for};

use super::WITHIN;
use crate::harness::{canonical, Fill, Harness};

/// Blocks per catch-up read in these tests.
const SPAN: u64 = 20;

/// Wait until pmw-live's watermark reaches the chain head.
async fn ingested(h: &Harness) {
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    let c = h.db.connect().await;
    assert_eventually!(
        WITHIN,
        c.query_opt("SELECT block_number FROM ingest_cursor WHERE id = 1", &[])
            .await
            .unwrap()
            .is_some_and(|r| r.get::<_, i64>(0) as u64 >= head),
        "live behind head {head}"
    );
}

/// The fills the endpoint received (once per `webhook-id`), by identity.
fn received(r: &Receiver) -> (BTreeSet<Fill>, usize) {
    let mut ids = BTreeSet::new();
    let mut fills = BTreeSet::new();
    let mut dup = 0;
    for hit in r.hits() {
        if !ids.insert(hit.id.clone()) {
            continue; // a retry of the same message
        }
        let v = hit.json();
        let t = &v["trade"];
        let fill = (
            t["block_number"].as_u64().unwrap(),
            t["log_index"].as_u64().unwrap(),
            t["block_hash"].as_str().unwrap().to_lowercase(),
        );
        if v["type"] == "trade" && !fills.insert(fill) {
            dup += 1;
        }
    }
    (fills, dup)
}

/// Push stops; trades and long runs of empty blocks are ingested meanwhile; a new leader reads
/// the backlog in spans of [`SPAN`] blocks. With `short_block`, one block with trades is
/// recorded with one trade more than stored until the test restores it.
async fn catch_up(short_block: bool) {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (account, _) = h.account(&wallets).await;
    let hook = Receiver::start(vec![Step::status(200)]).await;
    h.endpoint(account, &hook.url()).await;
    let (push, _) = h.leader("push-a").await;
    h.wait_pushed(WITHIN).await;
    push.stop().await.unwrap();
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;

    for (matches, empty) in [(3, 3 * SPAN + 5), (3, 2 * SPAN), (2, 0)] {
        h.sim.run_matches(matches).await.unwrap();
        for _ in 0..empty {
            h.sim.rpc().mine().await.unwrap();
        }
    }
    ingested(&h).await;
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    let owed = canonical(
        &h.anvil.http_url(),
        start,
        &wallets.iter().map(|w| w.to_lower_hex()).collect::<Vec<_>>(),
    )
    .await;
    assert!(head > start + 5 * SPAN && !owed.is_empty());

    // The short block: the second batch's first block with trades, several spans in.
    let short = owed
        .iter()
        .map(|f| f.0)
        .find(|b| *b > start + 3 * SPAN)
        .expect("trades after the first empty run");
    let pg = h.db.connect().await;
    pg.execute(
        "UPDATE stored_cursor SET floor_block = $1",
        &[&(head as i64 + 1)],
    )
    .await
    .unwrap();
    if short_block {
        pg.execute(
            "UPDATE chain_blocks SET trade_count = trade_count + 1 WHERE block_number = $1",
            &[&(short as i64)],
        )
        .await
        .unwrap();
    }

    let mut push_cfg = h.push_config();
    push_cfg.push_catchup_span_blocks = SPAN;
    let (push, _) = h.start_push("push-b", push_cfg);
    if short_block {
        // The cursor reaches the block before the short one and stays there; nothing of the
        // short block or after it is delivered.
        assert_eventually!(
            WITHIN,
            h.pushed_block().await + 1 >= short,
            "catch-up stalled early"
        );
        // Negative check: the cursor stays before the short block for the whole window.
        observe_for(Duration::from_secs(2)).await;
        let at = h.pushed_block().await;
        let (got, _) = received(&hook);
        let past = got.iter().filter(|f| f.0 >= short).count();
        println!(
            "short block {short}: cursor held at block {at}, fills delivered from it on: {past}"
        );
        assert!(
            at < short,
            "the cursor moved past the short block {short} (at {at})"
        );
        assert_eq!(past, 0, "fills of the short block or later were delivered");
        pg.execute(
            "UPDATE chain_blocks SET trade_count = trade_count - 1 WHERE block_number = $1",
            &[&(short as i64)],
        )
        .await
        .unwrap();
    }
    h.wait_pushed(WITHIN).await;
    assert!(h.pushed_block().await >= head);
    // Whatever arrived within the wait is counted below (lost, phantom, duplicated).
    eventually_every(WITHIN, Duration::from_millis(200), || async {
        received(&hook).0.len() >= owed.len()
    })
    .await;
    let (got, dup) = received(&hook);
    push.stop().await.unwrap();
    let lost = owed.difference(&got).count();
    let phantom = got.difference(&owed).count();
    println!(
        "catch-up over {} blocks in spans of {SPAN}: owed {} received {} lost {lost} phantom {phantom} duplicated {dup}",
        head - start,
        owed.len(),
        got.len()
    );
    assert_eq!((lost, phantom, dup), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_reads_in_spans_and_moves_past_empty_blocks() {
    catch_up(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_never_moves_past_a_block_that_came_back_short() {
    catch_up(true).await;
}
