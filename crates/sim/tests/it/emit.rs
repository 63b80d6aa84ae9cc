//! On a private anvil: the emitters installed at the four exchange addresses emit logs that,
//! fetched back with eth_getLogs, have the real layout byte for byte, in the real order; the
//! simulator's record (and its report file) matches the receipts.

use std::collections::{BTreeMap, HashSet};

use crate::common::*;
use pmw_core::Address;
use pmw_sim::anvil::Anvil;
use pmw_sim::rpc::Log;
use pmw_sim::{read_report, Emitted, Role, Side, Sim, SimConfig, Version, EXCHANGES};
use serde_json::json;

fn word(data: &[u8], i: usize) -> &[u8] {
    &data[i * 32..(i + 1) * 32]
}

fn word_u64(w: &[u8]) -> u64 {
    assert!(w[..24].iter().all(|b| *b == 0), "amount exceeds u64");
    u64::from_be_bytes(w[24..].try_into().unwrap())
}

fn topic_address(t: &pmw_sim::B256) -> Address {
    assert!(
        t.0[..12].iter().all(|b| *b == 0),
        "address topic is left-padded"
    );
    Address::from_slice(&t.0[12..]).unwrap()
}

/// Checks one OrderFilled log against its record, decoding the raw words independently of the
/// library's decoder.
fn check_order_filled(log: &Log, rec: &Emitted) {
    let version = rec.version;
    let reference = match version {
        Version::V1 => V1_ORDER_FILLED,
        Version::V2 => V2_ORDER_FILLED,
    };
    assert_eq!(log.topics[0].to_string(), reference);
    assert_eq!(log.topics.len(), 4, "OrderFilled has 3 indexed params");
    let data = &log.data.0;
    assert_eq!(data.len(), 32 * if version == Version::V1 { 5 } else { 7 });
    assert_eq!(log.topics[1], rec.order_hash);
    assert_eq!(topic_address(&log.topics[2]), rec.maker);
    assert_eq!(topic_address(&log.topics[3]), rec.taker);
    let token = rec.token_id.to_be_bytes();
    let (making, taking) = match rec.side {
        Side::Buy => (rec.collateral, rec.shares),
        Side::Sell => (rec.shares, rec.collateral),
    };
    match version {
        Version::V1 => {
            let zero = [0u8; 32];
            let (maker_asset, taker_asset) = match rec.side {
                Side::Buy => (&zero, &token),
                Side::Sell => (&token, &zero),
            };
            assert_eq!(word(data, 0), maker_asset);
            assert_eq!(word(data, 1), taker_asset);
        }
        Version::V2 => {
            assert_eq!(
                word_u64(word(data, 0)),
                if rec.side == Side::Buy { 0 } else { 1 }
            );
            assert_eq!(word(data, 1), token);
        }
    }
    assert_eq!(word_u64(word(data, 2)), making);
    assert_eq!(word_u64(word(data, 3)), taking);
    assert_eq!(word_u64(word(data, 4)), rec.fee);
    // Exact price on a 0.01 tick in (0, 1).
    assert!(rec.shares > 0 && rec.collateral > 0 && rec.collateral < rec.shares);
    assert_eq!(
        (rec.collateral * 100) % rec.shares,
        0,
        "price is a whole cent"
    );
}

#[tokio::test]
async fn emitted_logs_have_the_real_layout_and_match_the_record() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let cfg = SimConfig {
        seed: 42,
        max_makers: 3,
        ..SimConfig::default()
    };
    let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("emitted.jsonl");
    sim.set_report(&report).unwrap();
    sim.install_emitters().await.unwrap();
    for ex in EXCHANGES {
        let code = sim.rpc().code(&ex.address).await.unwrap();
        assert_eq!(
            code,
            ex.version.artifact().runtime_code,
            "code at {}",
            ex.address
        );
    }

    let mut fills = sim.run_matches(16).await.unwrap();
    let batch = sim.run_block(4).await.unwrap();
    let batch_blocks: HashSet<u64> = batch.iter().map(|e| e.block_number).collect();
    assert_eq!(batch_blocks.len(), 1, "a batch lands in one block");
    let batch_txs: HashSet<_> = batch.iter().map(|e| e.tx_hash).collect();
    assert_eq!(batch_txs.len(), 4);
    fills.extend(batch);
    assert_eq!(fills, sim.emitted());

    let seen: HashSet<(Version, bool)> = fills.iter().map(|e| (e.version, e.neg_risk)).collect();
    assert_eq!(seen.len(), 4, "all four exchanges used: {seen:?}");
    let per_match = fills
        .iter()
        .fold(BTreeMap::<u64, usize>::new(), |mut m, e| {
            *m.entry(e.match_id.unwrap()).or_default() += 1;
            m
        });
    assert_eq!(per_match.len(), 20);
    assert!(
        per_match.values().any(|n| *n > 2),
        "some matches have several maker orders"
    );

    // Every log of the four exchanges, fetched back.
    let addresses: Vec<String> = EXCHANGES.iter().map(|e| e.address.to_string()).collect();
    let logs = sim
        .rpc()
        .logs(json!({"fromBlock": "0x0", "toBlock": "latest", "address": addresses}))
        .await
        .unwrap();
    let by_key: BTreeMap<(u64, u64), &Emitted> = fills.iter().map(|e| (e.key(), e)).collect();
    let mut by_tx: BTreeMap<(u64, u64), Vec<&Log>> = BTreeMap::new();
    for log in &logs {
        by_tx
            .entry((log.block_number.0, log.transaction_index.0))
            .or_default()
            .push(log);
    }
    assert_eq!(by_tx.len(), 20, "one transaction per match");
    let mut checked = 0;
    for tx_logs in by_tx.values() {
        let n = tx_logs.len();
        assert!(
            n >= 3,
            "at least one maker fill, the taker fill and OrdersMatched"
        );
        let exchange = tx_logs[0].address;
        assert!(tx_logs.iter().all(|l| l.address == exchange));
        let taker_fill = &by_key[&(tx_logs[n - 2].block_number.0, tx_logs[n - 2].log_index.0)];
        let aggressor = taker_fill.maker;
        for (i, log) in tx_logs[..n - 1].iter().enumerate() {
            let rec = by_key[&(log.block_number.0, log.log_index.0)];
            assert_eq!(rec.exchange, exchange);
            assert_eq!(rec.tx_hash, log.transaction_hash);
            assert_eq!(rec.block_hash, log.block_hash);
            check_order_filled(log, rec);
            if i == n - 2 {
                assert_eq!(rec.role, Role::Taker);
                assert_eq!(
                    topic_address(&log.topics[3]),
                    exchange,
                    "taker-order fill's taker is the exchange"
                );
            } else {
                assert_eq!(rec.role, Role::Maker);
                assert_eq!(
                    topic_address(&log.topics[3]),
                    aggressor,
                    "maker fills' taker is the aggressor"
                );
                assert_ne!(rec.maker, aggressor);
            }
            checked += 1;
        }
        let matched = tx_logs[n - 1];
        let reference = match taker_fill.version {
            Version::V1 => V1_ORDERS_MATCHED,
            Version::V2 => V2_ORDERS_MATCHED,
        };
        assert_eq!(matched.topics[0].to_string(), reference);
        assert_eq!(matched.topics.len(), 3);
        assert_eq!(matched.data.0.len(), 4 * 32);
        assert_eq!(matched.topics[1], taker_fill.order_hash);
        assert_eq!(topic_address(&matched.topics[2]), aggressor);
        // OrdersMatched repeats the taker fill's first four data words.
        assert_eq!(matched.data.0[..], tx_logs[n - 2].data.0[..4 * 32]);
    }
    assert_eq!(
        checked,
        fills.len(),
        "every OrderFilled log is recorded, and nothing else"
    );

    // The record matches the receipts.
    for tx in fills.iter().map(|e| e.tx_hash).collect::<HashSet<_>>() {
        let receipt = sim.rpc().receipt(&tx).await.unwrap().unwrap();
        let recs: Vec<&Emitted> = fills.iter().filter(|e| e.tx_hash == tx).collect();
        assert_eq!(recs.len() + 1, receipt.logs.len());
        for (rec, log) in recs.iter().zip(&receipt.logs) {
            assert_eq!(
                (rec.block_number, rec.log_index),
                (log.block_number.0, log.log_index.0)
            );
            assert_eq!(rec.block_hash, receipt.block_hash);
            assert_eq!(rec.tx_index, receipt.transaction_index.0);
        }
    }

    // The report file says the same.
    assert_eq!(read_report(&report).unwrap(), fills);
}

#[tokio::test]
async fn same_seed_emits_the_same_trades_on_a_fresh_chain() {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let anvil = Anvil::spawn().await.expect("anvil");
        let sim = Sim::connect_with(
            &anvil.http_url(),
            SimConfig {
                seed: 9,
                ..SimConfig::default()
            },
        )
        .await
        .unwrap();
        sim.install_emitters().await.unwrap();
        let fills = sim.run_matches(5).await.unwrap();
        runs.push(
            fills
                .into_iter()
                .map(|e| {
                    (
                        e.block_number,
                        e.log_index,
                        e.order_hash,
                        e.maker,
                        e.side,
                        e.token_id,
                        e.shares,
                        e.collateral,
                    )
                })
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(runs[0], runs[1]);
}

#[tokio::test]
async fn fills_of_a_wallet_are_the_logs_where_it_is_maker() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let cfg = SimConfig {
        wallets: pmw_sim::demo_wallets(3),
        seed: 5,
        ..SimConfig::default()
    };
    let wallet = cfg.wallets[0];
    let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
    sim.install_emitters().await.unwrap();
    let fills = sim.run_matches(10).await.unwrap();
    let mine: Vec<&Emitted> = fills.iter().filter(|e| e.maker == wallet).collect();
    assert!(!mine.is_empty());
    // Fetch by the indexed maker topic, as a consumer would.
    let topic = format!("0x{:0>64}", hex::encode(wallet.as_bytes()));
    let addresses: Vec<String> = EXCHANGES.iter().map(|e| e.address.to_string()).collect();
    let logs = sim
        .rpc()
        .logs(json!({
            "fromBlock": "0x0",
            "address": addresses,
            "topics": [[V1_ORDER_FILLED, V2_ORDER_FILLED], null, topic],
        }))
        .await
        .unwrap();
    let keys: Vec<(u64, u64)> = logs
        .iter()
        .map(|l| (l.block_number.0, l.log_index.0))
        .collect();
    assert_eq!(keys, mine.iter().map(|e| e.key()).collect::<Vec<_>>());
}

#[tokio::test]
async fn pmw_core_decoder_agrees_with_the_record() {
    use pmw_core::trade::{decode, Allowlist, RawLog};
    let anvil = Anvil::spawn().await.expect("anvil");
    let sim = Sim::connect_with(
        &anvil.http_url(),
        SimConfig {
            seed: 21,
            max_makers: 4,
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    sim.install_emitters().await.unwrap();
    sim.run_matches(6).await.unwrap();
    sim.run_block(3).await.unwrap();
    let addresses: Vec<String> = EXCHANGES.iter().map(|e| e.address.to_string()).collect();
    let logs: Vec<serde_json::Value> = sim
        .rpc()
        .call(
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "address": addresses}]),
        )
        .await
        .unwrap();
    let allow = Allowlist::polymarket();
    let mut decoded = Vec::new();
    for v in &logs {
        let raw = RawLog::from_rpc_json(v).unwrap();
        if let Some(fill) = decode(&raw, &allow).unwrap() {
            decoded.push(fill);
        }
    }
    let record = sim.emitted();
    assert_eq!(decoded.len(), record.len());
    for (f, e) in decoded.iter().zip(&record) {
        assert_eq!((f.block_number, f.log_index as u64), e.key());
        assert_eq!(f.block_hash, e.block_hash.0);
        assert_eq!(f.tx_hash, e.tx_hash.0);
        assert_eq!(f.exchange, e.exchange);
        assert_eq!(f.order_hash, e.order_hash.0);
        assert_eq!((f.maker, f.taker), (e.maker, e.taker));
        assert_eq!(
            f.side.as_str().to_lowercase(),
            serde_json::to_value(e.side).unwrap()
        );
        assert_eq!(f.token_id, e.token_id.0);
        assert_eq!(f.shares, e.shares.into());
        assert_eq!(f.collateral, e.collateral.into());
        assert_eq!(f.fee, e.fee.into());
        assert_eq!(
            f.fee_asset.as_str(),
            serde_json::to_value(e.fee_asset).unwrap()
        );
        assert!(f.price().exact);
    }
}
