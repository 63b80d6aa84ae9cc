//! Reorgs on a private anvil: `Sim::reorg` replaces blocks so that newHeads subscribers get a
//! head whose parent hash differs from the old chain's, marks the orphaned fills, and records
//! the new branch's fills with their new block hashes. Also a paced run on an interval-mining
//! chain, with a reorg while it mines.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::common::Heads;
use pmw_sim::anvil::Anvil;
use pmw_sim::{CancellationToken, Emitted, Exchange, ReorgPlan, RunConfig, Sim, SimConfig, B256};
use serde_json::json;

/// Every record is orphaned exactly when its block hash is no longer canonical, every
/// canonical record's log is on chain at its block hash and log index, and every simulator
/// transaction on the canonical chain is recorded.
async fn assert_record_matches_chain(sim: &Sim) {
    let recorded: BTreeSet<(B256, u64)> = sim
        .canonical()
        .iter()
        .map(|e| (e.block_hash, e.log_index))
        .collect();
    let head = sim.rpc().block_number().await.unwrap();
    let mut on_chain = BTreeSet::new();
    for n in 1..=head {
        let block = sim.rpc().block_with_txs(n).await.unwrap().unwrap();
        for tx in block.transactions {
            if tx.from != sim.sender() || tx.to.and_then(|t| Exchange::at(&t)).is_none() {
                continue;
            }
            let receipt = sim.rpc().receipt(&tx.hash).await.unwrap().unwrap();
            let fills = receipt.logs.len() - 1; // all but OrdersMatched
            on_chain.extend(
                receipt.logs[..fills]
                    .iter()
                    .map(|l| (l.block_hash, l.log_index.0)),
            );
        }
    }
    assert_eq!(
        recorded, on_chain,
        "the canonical record is exactly the simulator's fills on chain"
    );

    let mut canonical: HashMap<u64, B256> = HashMap::new();
    for e in sim.emitted() {
        if let std::collections::hash_map::Entry::Vacant(v) = canonical.entry(e.block_number) {
            v.insert(sim.rpc().block(e.block_number).await.unwrap().unwrap().hash);
        }
        let on_chain = canonical[&e.block_number] == e.block_hash;
        assert_eq!(e.orphaned, !on_chain, "record {:?} orphaned flag", e.key());
        if on_chain {
            let logs = sim
                .rpc()
                .logs(json!({"blockHash": e.block_hash, "address": e.exchange}))
                .await
                .unwrap();
            let log = logs
                .iter()
                .find(|l| l.log_index.0 == e.log_index)
                .expect("log on chain");
            assert_eq!(log.transaction_hash, e.tx_hash);
            assert_eq!(log.topics[1], e.order_hash);
        }
    }
}

#[tokio::test]
async fn reorg_of_depth_two_gives_a_head_with_a_different_parent() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let sim = Sim::connect_with(
        &anvil.http_url(),
        SimConfig {
            seed: 11,
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    sim.install_emitters().await.unwrap();
    sim.run_matches(5).await.unwrap();

    let mut heads = Heads::subscribe(&anvil.ws_url()).await;
    let old_head = sim.rpc().latest_block().await.unwrap();
    let n = old_head.number.0;
    let old_parent = sim.rpc().block(n - 1).await.unwrap().unwrap();
    let ancestor = sim.rpc().block(n - 2).await.unwrap().unwrap();
    let before: Vec<Emitted> = sim.emitted();

    let out = sim.reorg(2).await.unwrap();
    assert_eq!(out.common_ancestor, n - 2);
    assert_eq!(out.old_head.hash, old_head.hash);
    assert_eq!(
        out.new_head.number, n,
        "depth blocks replaced by as many new ones"
    );
    assert_ne!(out.new_head.hash, old_head.hash);
    assert_ne!(
        out.new_head.parent_hash, old_parent.hash,
        "the new head's parent is not the old chain's"
    );
    assert_eq!(out.orphaned_blocks, vec![old_parent.hash, old_head.hash]);
    let new_parent = sim.rpc().block(n - 1).await.unwrap().unwrap();
    assert_eq!(
        new_parent.parent_hash, ancestor.hash,
        "the branch forks at the common ancestor"
    );
    assert_eq!(
        sim.rpc().block(n - 2).await.unwrap().unwrap().hash,
        ancestor.hash
    );

    // newHeads subscribers see the new branch: a head at or below the old height whose parent
    // hash differs from the old chain's block below it.
    let mut saw_fork = false;
    while let Some(h) = heads.next(Duration::from_secs(3)).await {
        if h.number == n - 1 {
            assert_eq!(h.parent_hash, ancestor.hash);
            assert_ne!(h.hash, old_parent.hash);
            saw_fork = true;
        }
        if h.number == n {
            assert_ne!(h.parent_hash, old_parent.hash);
            assert_eq!(h.hash, out.new_head.hash);
            break;
        }
    }
    assert!(
        saw_fork,
        "newHeads delivered the first block of the new branch"
    );

    // The record: fills of the two replaced blocks are orphaned, the new branch's are added.
    let expected_orphans: Vec<Emitted> = before
        .iter()
        .filter(|e| e.block_number > n - 2)
        .map(|e| Emitted {
            orphaned: true,
            ..e.clone()
        })
        .collect();
    assert!(!expected_orphans.is_empty());
    assert_eq!(out.orphaned, expected_orphans);
    let new_blocks: BTreeSet<u64> = out.added.iter().map(|e| e.block_number).collect();
    assert_eq!(
        new_blocks,
        BTreeSet::from([n - 1, n]),
        "one fresh match in each new block"
    );
    assert!(out
        .added
        .iter()
        .all(|e| !e.orphaned && e.block_hash != old_head.hash));
    let all = sim.emitted();
    assert_eq!(all.len(), before.len() + out.added.len());
    assert_eq!(
        all.iter().filter(|e| e.orphaned).count(),
        expected_orphans.len()
    );
    assert_record_matches_chain(&sim).await;
}

#[tokio::test]
async fn reorg_can_mine_the_orphaned_matches_again() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let sim = Sim::connect_with(
        &anvil.http_url(),
        SimConfig {
            seed: 12,
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    sim.install_emitters().await.unwrap();
    sim.run_matches(4).await.unwrap();
    let plan = ReorgPlan {
        depth: 2,
        new_matches_per_block: 0,
        replay_orphaned: true,
        ..ReorgPlan::new(2)
    };
    let out = sim.reorg_with(plan).await.unwrap();
    let key = |e: &Emitted| {
        (
            e.match_id,
            e.order_hash,
            e.maker,
            e.side,
            e.shares,
            e.collateral,
        )
    };
    let orphaned: Vec<_> = out.orphaned.iter().map(key).collect();
    let added: Vec<_> = out.added.iter().map(key).collect();
    assert!(!orphaned.is_empty());
    assert_eq!(orphaned, added, "the same trades, re-mined");
    for (o, a) in out.orphaned.iter().zip(&out.added) {
        assert_ne!(o.block_hash, a.block_hash);
        assert_eq!(
            o.block_number, a.block_number,
            "same offset from the common ancestor"
        );
    }
    assert_record_matches_chain(&sim).await;
    // The simulator carries on from the new head.
    sim.run_matches(2).await.unwrap();
    assert_record_matches_chain(&sim).await;
}

#[tokio::test]
async fn paced_run_on_an_interval_mining_chain_survives_a_reorg() {
    let anvil = Anvil::spawn_with(&["--block-time", "0.3"])
        .await
        .expect("anvil");
    let sim = Sim::connect_with(
        &anvil.http_url(),
        SimConfig {
            seed: 13,
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    sim.install_emitters().await.unwrap();
    let run = RunConfig {
        matches_per_block: 3,
        count: Some(9),
        ..RunConfig::default()
    };
    let sent = sim
        .spawn(run, CancellationToken::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sent, 9);
    let fills = sim.emitted();
    let mut txs_per_block: HashMap<u64, BTreeSet<B256>> = HashMap::new();
    for e in &fills {
        txs_per_block
            .entry(e.block_number)
            .or_default()
            .insert(e.tx_hash);
    }
    assert_eq!(txs_per_block.values().map(BTreeSet::len).sum::<usize>(), 9);
    assert!(
        txs_per_block.values().any(|t| t.len() > 1),
        "matches share blocks: {txs_per_block:?}"
    );

    // A reorg while the chain keeps mining, and a run that goes on after it.
    let cancel = CancellationToken::new();
    let run = RunConfig {
        matches_per_block: 1,
        interval: Duration::from_millis(100),
        ..RunConfig::default()
    };
    let task = sim.spawn(run, cancel.clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    let out = sim.reorg(2).await.unwrap();
    assert!(!out.orphaned.is_empty() || !out.added.is_empty());
    tokio::time::sleep(Duration::from_millis(800)).await;
    cancel.cancel();
    let sent = task.await.unwrap().unwrap();
    assert!(sent >= 2, "the run kept going: {sent}");
    assert_record_matches_chain(&sim).await;
}
