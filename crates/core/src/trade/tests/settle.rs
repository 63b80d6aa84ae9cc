//! Settlement calldata tests: selectors derived from the signatures and compared with the ones
//! public decoders report, the argument lists checked against the signatures by the ABI crate's
//! own selector function, and decoding of calls built with the ABI encoder (the encoder is a
//! separate code path from pmw's field mapping, which is what these check).

use ethabi::Token;

use super::super::settle::{decode, Call, CallError, Domain, Role, V2_ORDER_TYPE};
use super::{addr, w32, AbiVersion, Address, Side, U256};
use super::{BUILDER, ORDER_HASH, TOKEN_A_DEC, TOKEN_B_DEC, V1_CTF, V1_NEG_RISK, V2_CTF};

const OPERATOR_CHAIN: u64 = 137;

fn domain(version: AbiVersion) -> Domain {
    let exchange = match version {
        AbiVersion::V1 => V1_CTF,
        AbiVersion::V2 => V2_CTF,
    };
    Domain {
        chain_id: OPERATOR_CHAIN,
        exchange: addr(exchange),
    }
}

fn eth_addr(hex_addr: &str) -> Token {
    Token::Address(ethabi::Address::from_slice(
        &hex::decode(hex_addr).expect("hex"),
    ))
}

fn u(v: u64) -> Token {
    Token::Uint(U256::from(v))
}

/// A V1 order: `side` 0 BUY / 1 SELL, amounts in base units.
fn v1_order(maker: &str, side: u64, maker_amount: u64, taker_amount: u64, salt: u64) -> Token {
    Token::Tuple(vec![
        u(salt),
        eth_addr(maker),
        eth_addr(maker),
        eth_addr("0000000000000000000000000000000000000000"),
        Token::Uint(U256::from_dec_str(TOKEN_A_DEC).expect("token id")),
        u(maker_amount),
        u(taker_amount),
        u(0),
        u(0),
        u(0),
        u(side),
        u(0),
        Token::Bytes(vec![0x5a; 65]),
    ])
}

fn v2_order(maker: &str, side: u64, maker_amount: u64, taker_amount: u64, salt: u64) -> Token {
    Token::Tuple(vec![
        u(salt),
        eth_addr(maker),
        eth_addr(maker),
        Token::Uint(U256::from_dec_str(TOKEN_B_DEC).expect("token id")),
        u(maker_amount),
        u(taker_amount),
        u(side),
        u(0),
        u(1_780_000_000),
        Token::FixedBytes(vec![0; 32]),
        Token::FixedBytes(w32(BUILDER).to_vec()),
        Token::Bytes(vec![0x5b; 65]),
    ])
}

fn calldata(call: Call, args: &[Token]) -> Vec<u8> {
    let mut out = call.selector().to_vec();
    out.extend(ethabi::encode(args));
    out
}

fn u_list(values: &[u64]) -> Token {
    Token::Array(values.iter().map(|v| u(*v)).collect())
}

const WALLET_A: &str = "9d84ce0306f8551e02efef1680475fc0f1dc1344";
const WALLET_B: &str = "a253d75c2dfb2c6650291d5e8d54076d2fb40181";
const WALLET_C: &str = "1111111111111111111111111111111111111111";

#[test]
fn selectors_derived_from_the_signatures_match_the_ones_public_decoders_report() {
    // Reported by public decoders of Polygon settlement transactions (docs/SETTLEMENT.md).
    assert_eq!(
        hex::encode(Call::V1FeeModuleMatchOrders.selector()),
        "2287e350"
    );
    assert_eq!(hex::encode(Call::V2MatchOrders.selector()), "3c2b4399");
    // The V1 exchange's own entry points, from Polymarket/ctf-exchange `CTFExchange.sol`. One
    // third-party decoder labels 0xa4a6c5a5 "matchOrders" and 0xe20b2304 "fillOrder": neither
    // is the hash of the source's signature (docs/SETTLEMENT.md says which is right and why).
    assert_eq!(hex::encode(Call::V1MatchOrders.selector()), "e60f0c05");
    assert_eq!(hex::encode(Call::V1FillOrder.selector()), "fe729aaf");
    assert_eq!(hex::encode(Call::V1FillOrders.selector()), "d798eff6");
    for disputed in [[0xa4, 0xa6, 0xc5, 0xa5], [0xe2, 0x0b, 0x23, 0x04]] {
        assert_eq!(Call::of_selector(disputed), None);
    }
    let mut all: Vec<[u8; 4]> = Call::ALL.iter().map(|c| c.selector()).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), Call::ALL.len(), "selectors are distinct");
}

#[test]
fn each_argument_list_hashes_to_its_signatures_selector() {
    for call in Call::ALL {
        let sig = call.signature();
        let name = &sig[..sig.find('(').expect("signature has arguments")];
        assert_eq!(
            ethabi::short_signature(name, &call.params()),
            call.selector(),
            "{call:?}: params and signature disagree"
        );
    }
}

#[test]
fn the_v2_order_type_hashes_to_the_exchanges_published_typehash() {
    // `ORDER_TYPEHASH` as a literal constant in the CLOB V2 exchange's Structs.sol.
    assert_eq!(
        hex::encode(super::super::settle::keccak(V2_ORDER_TYPE.as_bytes())),
        "bb86318a2138f5fa8ae32fbe8e659f8fcf13cc6ae4014a707893055433818589"
    );
}

#[test]
fn a_fee_module_match_decodes_to_its_makers_then_its_taker() {
    // The taker SELLs 30 shares of TOKEN_A; two makers BUY 10 and 20 of them at 0.40 and 0.45.
    let input = calldata(
        Call::V1FeeModuleMatchOrders,
        &[
            v1_order(WALLET_A, 1, 30_000_000, 12_000_000, 1),
            Token::Array(vec![
                v1_order(WALLET_B, 0, 4_000_000, 10_000_000, 2),
                v1_order(WALLET_C, 0, 9_000_000, 20_000_000, 3),
            ]),
            u(30_000_000),
            u(13_000_000),
            u_list(&[4_000_000, 9_000_000]),
            u(70_000),
            u_list(&[0, 15_000]),
        ],
    );
    let s = decode(&input, &domain(AbiVersion::V1)).expect("decodes");
    assert_eq!(s.call, Call::V1FeeModuleMatchOrders);
    assert_eq!(s.condition_id, None);
    let owners: Vec<Address> = s.fills.iter().map(|f| f.order.maker).collect();
    assert_eq!(owners, [addr(WALLET_B), addr(WALLET_C), addr(WALLET_A)]);
    let roles: Vec<Role> = s.fills.iter().map(|f| f.role).collect();
    assert_eq!(roles, [Role::Maker, Role::Maker, Role::Taker]);
    let b = &s.fills[0];
    assert_eq!(
        (b.order.side, b.collateral(), b.shares()),
        (Side::Buy, 4_000_000.into(), 10_000_000.into())
    );
    assert_eq!(b.fee, Some(U256::zero()));
    assert_eq!(s.fills[1].fee, Some(15_000.into()));
    let taker = &s.fills[2];
    // The taker's proceeds are what the call names (13.0), not its limit price (12.0).
    assert_eq!(
        (taker.order.side, taker.shares(), taker.collateral()),
        (Side::Sell, 30_000_000.into(), 13_000_000.into())
    );
    assert_eq!(taker.fee, Some(70_000.into()));
    assert_eq!(
        taker.order.token_id,
        U256::from_dec_str(TOKEN_A_DEC).unwrap()
    );
    let hashes: std::collections::HashSet<[u8; 32]> =
        s.fills.iter().map(|f| f.order.hash).collect();
    assert_eq!(hashes.len(), 3, "each order has its own hash");
}

#[test]
fn order_hashes_are_bound_to_the_chain_the_exchange_and_every_signed_field() {
    let order = || v1_order(WALLET_A, 0, 5_000_000, 10_000_000, 42);
    let input = calldata(Call::V1FillOrder, &[order(), u(5_000_000)]);
    let hash = |d: &Domain| decode(&input, d).expect("decodes").fills[0].order.hash;
    let base = hash(&domain(AbiVersion::V1));
    let other_chain = Domain {
        chain_id: 80002,
        ..domain(AbiVersion::V1)
    };
    let other_exchange = Domain {
        exchange: addr(V1_NEG_RISK),
        ..domain(AbiVersion::V1)
    };
    assert_ne!(base, hash(&other_chain));
    assert_ne!(base, hash(&other_exchange));
    let resalted = calldata(
        Call::V1FillOrder,
        &[
            v1_order(WALLET_A, 0, 5_000_000, 10_000_000, 43),
            u(5_000_000),
        ],
    );
    assert_ne!(
        base,
        decode(&resalted, &domain(AbiVersion::V1)).unwrap().fills[0]
            .order
            .hash
    );
    // The signature is not part of the hash: a re-signed order keeps its hash.
    let Token::Tuple(mut fields) = order() else {
        unreachable!()
    };
    fields[12] = Token::Bytes(vec![0x77; 65]);
    let resigned = calldata(Call::V1FillOrder, &[Token::Tuple(fields), u(5_000_000)]);
    assert_eq!(
        base,
        decode(&resigned, &domain(AbiVersion::V1)).unwrap().fills[0]
            .order
            .hash
    );
}

#[test]
fn a_v2_match_carries_its_condition_and_explicit_fees() {
    let input = calldata(
        Call::V2MatchOrders,
        &[
            Token::FixedBytes(w32(ORDER_HASH).to_vec()),
            v2_order(WALLET_A, 0, 6_000_000, 10_000_000, 9),
            Token::Array(vec![v2_order(WALLET_B, 1, 10_000_000, 5_500_000, 10)]),
            u(6_000_000),
            u_list(&[10_000_000]),
            u(12_000),
            u_list(&[11_000]),
        ],
    );
    let s = decode(&input, &domain(AbiVersion::V2)).expect("decodes");
    assert_eq!(s.condition_id, Some(w32(ORDER_HASH)));
    let [maker, taker] = &s.fills[..] else {
        panic!("two fills: {s:?}")
    };
    assert_eq!(
        (maker.order.maker, maker.order.side),
        (addr(WALLET_B), Side::Sell)
    );
    assert_eq!(
        (maker.shares(), maker.collateral(), maker.fee),
        (10_000_000.into(), 5_500_000.into(), Some(11_000.into()))
    );
    assert_eq!(
        (taker.order.maker, taker.role, taker.fee),
        (addr(WALLET_A), Role::Taker, Some(12_000.into()))
    );
    assert_eq!(
        (taker.collateral(), taker.shares()),
        (6_000_000.into(), 10_000_000.into())
    );
    assert_eq!(
        taker.order.token_id,
        U256::from_dec_str(TOKEN_B_DEC).unwrap()
    );
}

#[test]
fn a_partial_fill_estimates_the_taking_side_at_the_orders_price_rounded_down() {
    let input = calldata(
        Call::V1FillOrders,
        &[
            Token::Array(vec![v1_order(WALLET_A, 0, 3_000_000, 7_000_000, 5)]),
            u_list(&[1_000_000]),
        ],
    );
    let f = &decode(&input, &domain(AbiVersion::V1)).unwrap().fills[0];
    // 1_000_000 × 7_000_000 / 3_000_000 = 2_333_333.33…, floored as the exchange does.
    assert_eq!(
        (f.collateral(), f.shares(), f.fee),
        (1_000_000.into(), 2_333_333.into(), None)
    );
}

#[test]
fn calldata_that_is_not_a_well_formed_settlement_is_refused_with_the_reason() {
    let d = domain(AbiVersion::V1);
    assert_eq!(decode(&[0x12, 0x34], &d), Err(CallError::Short(2)));
    let approve = hex::decode("095ea7b3").unwrap();
    assert_eq!(
        decode(&approve, &d),
        Err(CallError::NotSettlement([0x09, 0x5e, 0xa7, 0xb3]))
    );
    let good = calldata(Call::V1FillOrder, &[v1_order(WALLET_A, 0, 5, 10, 1), u(5)]);
    assert!(matches!(
        decode(&good[..good.len() - 40], &d),
        Err(CallError::Abi { .. })
    ));
    let bad_side = calldata(Call::V1FillOrder, &[v1_order(WALLET_A, 2, 5, 10, 1), u(5)]);
    assert!(
        matches!(decode(&bad_side, &d), Err(CallError::Invalid { what, .. }) if what.contains("side"))
    );
    let overfill = calldata(Call::V1FillOrder, &[v1_order(WALLET_A, 0, 5, 10, 1), u(6)]);
    assert!(
        matches!(decode(&overfill, &d), Err(CallError::Invalid { what, .. }) if what.contains("above"))
    );
    let uneven = calldata(
        Call::V1FillOrders,
        &[
            Token::Array(vec![v1_order(WALLET_A, 0, 5, 10, 1)]),
            u_list(&[1, 2]),
        ],
    );
    assert!(matches!(
        decode(&uneven, &d),
        Err(CallError::Invalid { .. })
    ));
    let empty = calldata(Call::V1FillOrders, &[Token::Array(vec![]), u_list(&[])]);
    assert!(matches!(
        decode(&empty, &d),
        Err(CallError::Invalid {
            what: "no orders",
            ..
        })
    ));
}
