//! Issue 45 item 4 end to end, with pmw-push delivering: an unlisted emitter (pmw-sim's
//! look-alike at an address outside the exchange list) fills followed wallets, then the real
//! exchanges do. The WebSocket subscriber gets exactly the real exchanges' fills (`eth_getLogs`
//! on the chain), in ledger order, and never one of the look-alike block: had push delivered it,
//! it would have come first. The emitter is recorded.

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_sim::unlisted::DEFAULT_ADDRESS;
use pmw_sim::{demo_wallets, Version};
use serde_json::Value;

use crate::harness::{canonical, connect, hello_cursor, Fill, Harness};

const WITHIN: Duration = Duration::from_secs(60);

fn fill_of(m: &Value) -> Option<Fill> {
    let t = &m["trade"];
    Some((
        t["block_number"].as_u64()?,
        t["log_index"].as_u64()?,
        t["block_hash"].as_str()?.to_lowercase(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_emitters_look_alike_fills_of_followed_wallets_are_never_delivered() {
    let h = Harness::new().await;
    let (_push, addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    let all: Vec<String> = wallets.iter().map(|w| w.to_lower_hex()).collect();
    let (_account, key) = h.account(&wallets).await;
    let mut ws = connect(addr, &key, None).await;
    hello_cursor(&mut ws).await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;

    let fake = h
        .sim
        .emit_unlisted(DEFAULT_ADDRESS, Version::V2)
        .await
        .unwrap();
    assert!(
        fake.fills.iter().any(|f| wallets.contains(&f.maker)),
        "premise: the look-alike fills a followed wallet"
    );
    h.sim.run_matches(2).await.unwrap();
    let owed = canonical(&h.anvil.http_url(), start, &all).await;
    assert!(!owed.is_empty() && owed.iter().all(|f| f.0 > fake.block_number));

    let mut got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WITHIN;
    while got != owed {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let m = match tokio::time::timeout(left, ws.events.recv()).await {
            Ok(Some(m)) => m,
            _ => panic!("not every real fill arrived: got {got:?}, owed {owed:?}"),
        };
        let Some(f) = fill_of(&m).filter(|_| m["type"] == "trade") else {
            continue;
        };
        assert_ne!(
            f.0, fake.block_number,
            "a look-alike fill was delivered: {m}"
        );
        assert!(owed.contains(&f), "a fill that is not the chain's: {m}");
        got.insert(f);
    }

    // Recorded (off the commit: within a bounded wait).
    let c = h.db.connect().await;
    let recorded = pmw_testkit::eventually(WITHIN, || async {
        let (list, _) = pmw_core::pg::emitters::open(&c, 10).await.unwrap();
        list.iter().any(|e| {
            e.address == DEFAULT_ADDRESS.to_lower_hex()
                && e.first_block == fake.block_number as i64
                && e.events == fake.events as i64
        })
    })
    .await;
    assert!(recorded, "the emitter is not recorded");
}
