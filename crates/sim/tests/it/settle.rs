//! The settlement stand-ins on a private anvil: the real V1/V2 settlement calls (calldata built
//! with the ABI encoder) are accepted, the logs they emit carry the order hashes the Solidity
//! contracts compute, and pmw's settlement decoder (pmw_core::trade::settle) predicts those
//! hashes and the fills from the calldata alone. The compiler's method identifiers are a second,
//! independent derivation of the selectors pmw decodes.

use std::collections::BTreeMap;
use std::time::Duration;

use ethabi::Token;
use pmw_core::trade::settle::{self, Call, Domain, PlannedFill, Role};
use pmw_core::trade::{self, Allowlist, RawLog, Side, U256};
use pmw_core::Address;
use pmw_sim::anvil::Anvil;
use pmw_sim::contracts::{V1_CTF_EXCHANGE, V2_CTF_EXCHANGE};
use pmw_sim::rpc::{Bytes, Quantity, Receipt, Rpc, TxRequest};
use pmw_sim::settlement::{self as standin, Contract, FEE_MODULES, V1_FEE_MODULE};
use pmw_sim::{Emitted, Fate, Outcome, ReorgPlan, Sim, SimConfig};

const TOKEN: u64 = 0x00c0_ffee;
const MAKER_A: &str = "a253d75c2dfb2c6650291d5e8d54076d2fb40181";
const MAKER_B: &str = "1111111111111111111111111111111111111111";
const TAKER: &str = "9d84ce0306f8551e02efef1680475fc0f1dc1344";

fn u(v: u64) -> Token {
    Token::Uint(U256::from(v))
}

fn who(hex_addr: &str) -> Token {
    Token::Address(ethabi::Address::from_slice(&hex::decode(hex_addr).unwrap()))
}

fn v1_order(maker: &str, side: u64, making: u64, taking: u64, salt: u64) -> Token {
    let zero = "0000000000000000000000000000000000000000";
    Token::Tuple(vec![
        u(salt),
        who(maker),
        who(maker),
        who(zero),
        u(TOKEN),
        u(making),
        u(taking),
        u(0),
        u(7),
        u(100),
        u(side),
        u(1),
        Token::Bytes(vec![0xab; 65]),
    ])
}

fn v2_order(maker: &str, side: u64, making: u64, taking: u64, salt: u64) -> Token {
    Token::Tuple(vec![
        u(salt),
        who(maker),
        who(maker),
        u(TOKEN),
        u(making),
        u(taking),
        u(side),
        u(2),
        u(1_780_000_000),
        Token::FixedBytes(vec![0x4d; 32]),
        Token::FixedBytes(vec![0xb1; 32]),
        Token::Bytes(vec![0xcd; 65]),
    ])
}

fn list(values: &[u64]) -> Token {
    Token::Array(values.iter().map(|v| u(*v)).collect())
}

fn calldata(call: Call, args: &[Token]) -> Vec<u8> {
    let mut input = call.selector().to_vec();
    input.extend(ethabi::encode(args));
    input
}

struct Chain {
    _anvil: Anvil,
    rpc: Rpc,
    operator: Address,
    chain_id: u64,
}

async fn chain() -> Chain {
    let anvil = Anvil::spawn().await.expect("anvil");
    let rpc = Rpc::new(&anvil.http_url()).unwrap();
    standin::install(&rpc).await.expect("install the stand-ins");
    let operator = rpc.accounts().await.unwrap()[0];
    let chain_id = rpc.chain_id().await.unwrap();
    Chain {
        _anvil: anvil,
        rpc,
        operator,
        chain_id,
    }
}

impl Chain {
    async fn send(&self, to: Address, input: &[u8]) -> Receipt {
        let tx = TxRequest {
            from: self.operator,
            to,
            data: Bytes(input.to_vec()),
            gas: Quantity(3_000_000),
            nonce: None,
            gas_price: None,
        };
        let hash = self.rpc.send_transaction(&tx).await.expect("send");
        self.rpc
            .wait_receipt(&hash, Duration::from_secs(20))
            .await
            .expect("receipt")
    }
}

/// The receipt's fills through pmw's production log decoder, in log order.
fn mined_fills(receipt: &Receipt) -> Vec<trade::Fill> {
    receipt
        .logs
        .iter()
        .filter_map(|l| {
            let raw = RawLog {
                address: l.address,
                topics: l.topics.iter().map(|t| t.0).collect(),
                data: l.data.0.clone(),
                block_number: l.block_number.0,
                block_hash: l.block_hash.0,
                tx_hash: l.transaction_hash.0,
                log_index: l.log_index.0 as u32,
            };
            trade::decode(&raw, &Allowlist::polymarket()).expect("decodes")
        })
        .collect()
}

/// Each planned fill is the mined fill at its position: same order hash (computed in Solidity
/// on chain, in Rust from the calldata), owner, side, token and amounts.
fn assert_planned_as_mined(planned: &[PlannedFill], mined: &[trade::Fill]) {
    assert_eq!(
        planned.len(),
        mined.len(),
        "one mined fill per planned fill"
    );
    for (p, m) in planned.iter().zip(mined) {
        assert_eq!(
            hex::encode(p.order.hash),
            hex::encode(m.order_hash),
            "order hash"
        );
        assert_eq!(p.order.maker, m.maker);
        assert_eq!(p.order.side, m.side);
        assert_eq!(p.order.token_id, m.token_id);
        assert_eq!(
            (p.shares(), p.collateral()),
            (m.shares, m.collateral),
            "{p:?}"
        );
    }
}

#[test]
fn the_compiler_derives_the_same_selectors_as_the_decoder() {
    let contract = |call: Call| match call {
        Call::V1FeeModuleMatchOrders => Contract::FeeModuleV1,
        Call::V2MatchOrders => Contract::SettlementV2,
        _ => Contract::SettlementV1,
    };
    for call in Call::ALL {
        let ids = &contract(call).artifact().method_identifiers;
        assert_eq!(
            ids.get(&call.signature()).map(String::as_str),
            Some(hex::encode(call.selector()).as_str()),
            "{call:?}: solc's identifiers {ids:?}"
        );
    }
}

#[tokio::test]
async fn a_fee_module_settlement_mines_the_fills_its_calldata_predicts() {
    let c = chain().await;
    // The taker BUYs 30 shares paying up to 0.5; two makers SELL 10 at 0.40 and 20 at 0.45.
    let input = calldata(
        Call::V1FeeModuleMatchOrders,
        &[
            v1_order(TAKER, 0, 15_000_000, 30_000_000, 1),
            Token::Array(vec![
                v1_order(MAKER_A, 1, 10_000_000, 4_000_000, 2),
                v1_order(MAKER_B, 1, 20_000_000, 9_000_000, 3),
            ]),
            u(15_000_000),
            u(30_000_000),
            list(&[10_000_000, 20_000_000]),
            u(0),
            list(&[0, 0]),
        ],
    );
    let domain = Domain {
        chain_id: c.chain_id,
        exchange: V1_CTF_EXCHANGE,
    };
    let planned = settle::decode(&input, &domain).expect("decodes").fills;
    let receipt = c.send(V1_FEE_MODULE, &input).await;
    assert_eq!(receipt.status.map(|s| s.0), Some(1), "mined: {receipt:?}");
    let mined = mined_fills(&receipt);
    assert_planned_as_mined(&planned, &mined);
    assert!(mined.iter().all(|m| m.exchange == V1_CTF_EXCHANGE));
    assert_eq!(planned.last().map(|f| f.role), Some(Role::Taker));

    // The same settlement again over-fills every order: it reverts, as on the real exchange.
    let again = c.send(V1_FEE_MODULE, &input).await;
    assert_eq!(again.status.map(|s| s.0), Some(0), "{again:?}");
    assert!(again.logs.is_empty());
}

#[tokio::test]
async fn a_v2_match_and_v1_direct_fills_mine_what_their_calldata_predicts() {
    let c = chain().await;
    let condition = Token::FixedBytes(vec![0xc0; 32]);
    let v2 = calldata(
        Call::V2MatchOrders,
        &[
            condition,
            v2_order(TAKER, 1, 12_000_000, 6_000_000, 11),
            Token::Array(vec![v2_order(MAKER_A, 0, 6_600_000, 12_000_000, 12)]),
            u(12_000_000),
            list(&[6_600_000]),
            u(30_000),
            list(&[20_000]),
        ],
    );
    let domain = Domain {
        chain_id: c.chain_id,
        exchange: V2_CTF_EXCHANGE,
    };
    let planned = settle::decode(&v2, &domain).expect("decodes");
    let receipt = c.send(V2_CTF_EXCHANGE, &v2).await;
    assert_eq!(receipt.status.map(|s| s.0), Some(1), "{receipt:?}");
    let mined = mined_fills(&receipt);
    // The taker SELLs 12 shares at 0.5 or better and receives the maker's 6.6: the calldata's
    // estimate (its limit price) is below what the log says, the difference pmw counts.
    let [maker, taker] = &planned.fills[..] else {
        panic!("{planned:?}")
    };
    assert_planned_as_mined(std::slice::from_ref(maker), &mined[..1]);
    assert_eq!(
        hex::encode(taker.order.hash),
        hex::encode(mined[1].order_hash)
    );
    assert_eq!(
        (taker.order.side, taker.collateral()),
        (Side::Sell, 6_000_000.into())
    );
    assert_eq!(mined[1].collateral, U256::from(6_600_000u64));
    assert_eq!((mined[0].fee, mined[1].fee), (20_000.into(), 30_000.into()));

    let direct = calldata(
        Call::V1FillOrders,
        &[
            Token::Array(vec![
                v1_order(MAKER_A, 0, 3_000_000, 7_000_000, 21),
                v1_order(MAKER_B, 1, 5_000_000, 2_500_000, 22),
            ]),
            list(&[1_000_000, 5_000_000]),
        ],
    );
    let domain = Domain {
        chain_id: c.chain_id,
        exchange: V1_CTF_EXCHANGE,
    };
    let planned = settle::decode(&direct, &domain).expect("decodes").fills;
    let receipt = c.send(V1_CTF_EXCHANGE, &direct).await;
    assert_eq!(receipt.status.map(|s| s.0), Some(1), "{receipt:?}");
    assert_planned_as_mined(&planned, &mined_fills(&receipt));
}

/// The simulator in settle mode: every match goes out as the real settlement call (V1 through
/// its fee module, V2 to the exchange), the receipts carry the planned fills with the order
/// hashes the stand-ins computed, each transaction's calldata alone predicts its mined fills,
/// and a reorg re-mines the orphaned settlements.
#[tokio::test]
async fn the_simulator_in_settle_mode_sends_real_settlements_a_reorg_replays() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let cfg = SimConfig {
        seed: 5,
        max_makers: 3,
        settle: true,
        ..SimConfig::default()
    };
    let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
    sim.install_emitters().await.unwrap();
    let mut fills = sim.run_matches(12).await.unwrap();
    fills.extend(sim.run_block(3).await.unwrap());
    assert_eq!(fills, sim.emitted());
    let chain_id = sim.rpc().chain_id().await.unwrap();
    let head = sim.rpc().block_number().await.unwrap();
    let mut calls = BTreeMap::<&str, usize>::new();
    for n in 1..=head {
        let block = sim.rpc().block_with_txs(n).await.unwrap().unwrap();
        for tx in block.transactions.iter().filter(|t| t.from == sim.sender()) {
            let to = tx.to.expect("a call");
            let input = &tx.input.0;
            let call = Call::of_selector(input[..4].try_into().unwrap()).expect("a settlement");
            let exchange = FEE_MODULES
                .iter()
                .find(|f| f.address == to)
                .map_or(to, |f| f.exchange);
            let planned = settle::decode(input, &Domain { chain_id, exchange }).unwrap();
            let receipt = sim.rpc().receipt(&tx.hash).await.unwrap().unwrap();
            assert_planned_as_mined(&planned.fills, &mined_fills(&receipt));
            *calls
                .entry(match call {
                    Call::V1FeeModuleMatchOrders => "v1 fee module",
                    Call::V2MatchOrders => "v2",
                    other => panic!("the simulator sent {other:?}"),
                })
                .or_default() += 1;
        }
    }
    assert_eq!(calls.values().sum::<usize>(), 15, "{calls:?}");
    assert_eq!(calls.len(), 2, "both versions settled: {calls:?}");

    let plan = ReorgPlan {
        depth: 2,
        new_matches_per_block: 1,
        replay_orphaned: true,
        ..ReorgPlan::new(2)
    };
    let out = sim.reorg_with(plan).await.unwrap();
    let key = |e: &Emitted| (e.match_id, e.order_hash, e.maker, e.shares, e.collateral);
    let added: Vec<_> = out.added.iter().map(key).collect();
    assert!(!out.orphaned.is_empty());
    assert!(
        out.orphaned.iter().all(|o| added.contains(&key(o))),
        "orphaned re-mined"
    );
    assert!(
        out.added.len() > out.orphaned.len(),
        "and the new branch's own matches"
    );
    sim.run_matches(2).await.unwrap();
}

/// Settle mode's mempool behaviours: doomed settlements mine with status 0, replaced ones are
/// superseded by a higher-fee transaction with their nonce, dropped ones never mine, the rest
/// mine their planned fills; and some V2 calldata underestimates what its taker receives. Each
/// outcome is read back from the chain.
#[tokio::test]
async fn settle_mode_reverts_replaces_drops_and_misestimates_as_planned() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let cfg = SimConfig {
        seed: 9,
        max_makers: 3,
        settle: true,
        revert_share: 0.15,
        replace_share: 0.15,
        drop_share: 0.15,
        estimate_gap_share: 0.6,
        linger_ms: 20,
        v2_share: 0.7,
        ..SimConfig::default()
    };
    let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
    sim.install_emitters().await.unwrap();
    let mut fills = Vec::new();
    for _ in 0..8 {
        fills.extend(sim.run_block(5).await.unwrap());
    }
    let settlements = sim.settlements();
    assert_eq!(settlements.len(), 40);
    let mut by_outcome = BTreeMap::<String, usize>::new();
    for s in &settlements {
        let expected = match s.fate {
            Fate::Mine => Outcome::Mined,
            Fate::Revert => Outcome::Reverted,
            Fate::Replace => Outcome::Replaced,
            Fate::Drop => Outcome::Dropped,
        };
        assert_eq!(s.outcome, expected, "{s:?}");
        *by_outcome.entry(format!("{:?}", s.outcome)).or_default() += 1;
        let receipt = sim.rpc().receipt(&s.tx_hash).await.unwrap();
        match s.outcome {
            Outcome::Mined => assert_eq!(receipt.unwrap().status.map(|q| q.0), Some(1)),
            Outcome::Reverted => assert_eq!(receipt.unwrap().status.map(|q| q.0), Some(0)),
            Outcome::Replaced | Outcome::Dropped => assert!(receipt.is_none(), "{s:?} mined"),
        }
    }
    assert_eq!(
        by_outcome.len(),
        4,
        "every outcome happened: {by_outcome:?}"
    );
    let mined: usize = settlements
        .iter()
        .filter(|s| s.outcome == Outcome::Mined)
        .map(|s| s.fills)
        .sum();
    assert_eq!(
        mined,
        fills.len(),
        "the record holds exactly the mined settlements' fills"
    );

    // Every mined settlement's calldata predicts its makers exactly; some takers' estimates
    // (their limit) fall short of what the logs say they received.
    let chain_id = sim.rpc().chain_id().await.unwrap();
    let mut gaps = 0;
    for s in settlements.iter().filter(|s| s.outcome == Outcome::Mined) {
        let receipt = sim.rpc().receipt(&s.tx_hash).await.unwrap().unwrap();
        let block = sim
            .rpc()
            .block_with_txs(receipt.block_number.0)
            .await
            .unwrap()
            .unwrap();
        let tx = block
            .transactions
            .iter()
            .find(|t| t.hash == s.tx_hash)
            .unwrap();
        let to = tx.to.unwrap();
        let exchange = FEE_MODULES
            .iter()
            .find(|f| f.address == to)
            .map_or(to, |f| f.exchange);
        let planned = settle::decode(&tx.input.0, &Domain { chain_id, exchange })
            .unwrap()
            .fills;
        let mined = mined_fills(&receipt);
        let n = planned.len();
        assert_planned_as_mined(&planned[..n - 1], &mined[..n - 1]);
        let (p, m) = (&planned[n - 1], &mined[n - 1]);
        assert_eq!(hex::encode(p.order.hash), hex::encode(m.order_hash));
        if (p.shares(), p.collateral()) != (m.shares, m.collateral) {
            gaps += 1;
        }
    }
    assert!(gaps > 0, "no settlement's estimate differed from its logs");
}
