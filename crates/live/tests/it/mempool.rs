//! The mempool watcher on a private anvil mining every 2 s, fed by pmw-sim in settle mode with
//! settlements that mine, revert, get replaced or dropped: every settlement transaction that
//! went through the pool is announced once, with the fills its calldata names (order hashes as
//! the chain's logs later carry them); other calls to an exchange are not announced.

use std::collections::HashMap;
use std::time::Duration;

use pmw_core::trade::settle::Settlement;
use pmw_live::config::ProviderUrls;
use pmw_live::mempool::{Sighting, Target, Watcher};
use pmw_sim::anvil::Anvil;
use pmw_sim::rpc::{Bytes, Quantity, TxRequest};
use pmw_sim::settlement::FEE_MODULES;
use pmw_sim::{Outcome, Sim, EXCHANGES};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const WITHIN: Duration = Duration::from_secs(30);

fn targets() -> Vec<Target> {
    let exchanges = EXCHANGES.iter().map(|e| Target {
        address: e.address,
        exchange: e.address,
    });
    let modules = FEE_MODULES.iter().map(|f| Target {
        address: f.address,
        exchange: f.exchange,
    });
    exchanges.chain(modules).collect()
}

/// Drains every sighting that has arrived, first sightings by transaction hash.
fn drain(rx: &mut mpsc::Receiver<Sighting>, into: &mut HashMap<[u8; 32], Settlement>) {
    while let Ok(s) = rx.try_recv() {
        if let Sighting::First { tx, settlement } = s {
            assert!(
                into.insert(tx.hash, settlement).is_none(),
                "a transaction was announced twice"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_settlement_through_the_pool_is_announced_with_its_fills() {
    let anvil = Anvil::spawn_with(&["--block-time", "2"])
        .await
        .expect("anvil");
    let cfg = super::pending::settle_config(21);
    let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
    sim.install_emitters().await.unwrap();
    let chain_id = sim.rpc().chain_id().await.unwrap();
    let watcher = Watcher {
        providers: vec![ProviderUrls {
            name: "anvil".into(),
            ws_url: anvil.ws_url(),
            http_url: anvil.http_url(),
        }],
        targets: targets(),
        chain_id,
    };
    let (tx, mut rx) = mpsc::channel(1024);
    let stop = CancellationToken::new();
    let task = tokio::spawn(watcher.run(tx, stop.clone()));

    // Until the subscription is live, settlements may pass unseen: settle until one is seen.
    let mut seen = HashMap::new();
    let started = tokio::time::Instant::now();
    while seen.is_empty() {
        assert!(started.elapsed() < WITHIN, "the watcher saw no settlement");
        sim.run_block(1).await.unwrap();
        drain(&mut rx, &mut seen);
    }
    let warmup = sim.settlements().len();

    // Junk to an exchange: a call that is not a settlement, and a truncated settlement.
    let sender = sim.sender();
    let junk = |input: Vec<u8>| TxRequest {
        from: sender,
        to: EXCHANGES[2].address,
        data: Bytes(input),
        gas: Quantity(100_000),
        nonce: None,
        gas_price: None,
    };
    let not_settlement = sim
        .rpc()
        .send_transaction(&junk(vec![0xde, 0xad, 0xbe, 0xef]))
        .await
        .unwrap();
    let truncated = sim
        .rpc()
        .send_transaction(&junk(vec![0x3c, 0x2b, 0x43, 0x99, 0, 0, 1]))
        .await
        .unwrap();

    for _ in 0..4 {
        sim.run_block(5).await.unwrap();
    }
    let settlements = sim.settlements()[warmup..].to_vec();
    let outcomes: std::collections::BTreeSet<String> = settlements
        .iter()
        .map(|s| format!("{:?}", s.outcome))
        .collect();
    assert!(outcomes.len() >= 3, "mixed outcomes: {outcomes:?}");
    let waited = tokio::time::Instant::now();
    while settlements.iter().any(|s| !seen.contains_key(&s.tx_hash.0)) {
        assert!(waited.elapsed() < WITHIN, "settlements never announced");
        tokio::time::sleep(Duration::from_millis(100)).await;
        drain(&mut rx, &mut seen);
    }
    for s in &settlements {
        let announced = &seen[&s.tx_hash.0];
        assert_eq!(announced.fills.len(), s.fills, "{s:?}");
        if s.outcome != Outcome::Mined {
            continue;
        }
        let receipt = sim.rpc().receipt(&s.tx_hash).await.unwrap().unwrap();
        let logged: Vec<[u8; 32]> = receipt
            .logs
            .iter()
            .filter(|l| l.topics.len() == 4)
            .map(|l| l.topics[1].0)
            .collect();
        let planned: Vec<[u8; 32]> = announced.fills.iter().map(|f| f.order.hash).collect();
        assert_eq!(planned, logged, "order hashes of {s:?}");
    }
    assert!(!seen.contains_key(&not_settlement.0) && !seen.contains_key(&truncated.0));
    stop.cancel();
    task.await.unwrap();
}
