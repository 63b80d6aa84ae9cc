//! Decoder tests. Fixtures here: hand-encoded V1/V2 `OrderFilled` logs, every topic and data
//! word written out as hex (no ABI encoder involved); the tests are in `accept` and `reject`.

use super::exchange::{ORDERS_MATCHED_V1, ORDERS_MATCHED_V2};
use super::raw_log::tests::REAL_V1_LOG;
use super::*;

mod accept;
mod reject;
mod settle;

const V1_CTF: &str = "4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e";
const V1_NEG_RISK: &str = "c5d563a36ae78145c45a50134d48a1215220f80a";
const V2_CTF: &str = "e111180000d2663c0091e4f400237545b87b996b";
const V2_NEG_RISK: &str = "e2222d279d744050d28e00520010520000310f59";

const T_FILLED_V1: &str = "d0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6";
const T_FILLED_V2: &str = "d543adfd945773f1a62f74f0ee55a5e3b9b1a28262980ba90b1a89f2ea84d8ee";
const T_MATCHED_V1: &str = "63bf4d16b7fa898ef4c4b2b6d90fd201e9c56313b65638af6088d149d2ce956c";
const ORDER_HASH: &str = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988";
const MAKER: &str = "0000000000000000000000009d84ce0306f8551e02efef1680475fc0f1dc1344";
const TAKER_EXCHANGE_V1: &str = "0000000000000000000000004bfb41d5b3570defd03c39a9a4d8de6bd8b8982e";
const TAKER_WALLET: &str = "000000000000000000000000a253d75c2dfb2c6650291d5e8d54076d2fb40181";
const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const ONE: &str = "0000000000000000000000000000000000000000000000000000000000000001";
/// 70224002415726915146697406828863644162763565870559027191380082229342088681891
const TOKEN_A: &str = "9b416078dcef4788b9214ebb2183050e57f68b55a236c97aba2cd75a4a1f59a3";
const TOKEN_A_DEC: &str =
    "70224002415726915146697406828863644162763565870559027191380082229342088681891";
/// 114856201873541567677341731370365137173235058495071385195611596664202155739948
const TOKEN_B: &str = "fdee4e7856e0a259cea17232d8e548f7309655d49c1eac7fe5813a188c3b4b2c";
const TOKEN_B_DEC: &str =
    "114856201873541567677341731370365137173235058495071385195611596664202155739948";
const BUILDER: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

fn w32(hex_word: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_word, &mut out).expect("test word is 64 hex digits");
    out
}

fn addr(hex_addr: &str) -> Address {
    Address::from_slice(&hex::decode(hex_addr).expect("hex")).expect("20 bytes")
}

fn raw(emitter: &str, topics: &[&str], data: &[&str]) -> RawLog {
    RawLog {
        address: addr(emitter),
        topics: topics.iter().map(|t| w32(t)).collect(),
        data: data.iter().flat_map(|d| w32(d)).collect(),
        block_number: 86_200_001,
        block_hash: [0xbb; 32],
        tx_hash: [0xcc; 32],
        log_index: 7,
    }
}

fn v1_buy() -> RawLog {
    raw(
        V1_CTF,
        &[T_FILLED_V1, ORDER_HASH, MAKER, TAKER_EXCHANGE_V1],
        &[
            ZERO,    // makerAssetId: collateral → the maker BUYs
            TOKEN_A, // takerAssetId
            "00000000000000000000000000000000000000000000000000000000004f5880", // 5_200_000
            "0000000000000000000000000000000000000000000000000000000000989680", // 10_000_000
            "0000000000000000000000000000000000000000000000000000000000004e20", // fee 20_000
        ],
    )
}

fn v1_sell() -> RawLog {
    raw(
        V1_NEG_RISK,
        &[T_FILLED_V1, ORDER_HASH, MAKER, TAKER_WALLET],
        &[
            TOKEN_B, // makerAssetId: the maker SELLs this token
            ZERO,    // takerAssetId: collateral
            "00000000000000000000000000000000000000000000000000000000002625a0", // 2_500_000
            "000000000000000000000000000000000000000000000000000000000011edd8", // 1_175_000
            "0000000000000000000000000000000000000000000000000000000000001388", // fee 5_000
        ],
    )
}

fn v2(emitter: &str, side: &str, amounts: [&str; 3]) -> RawLog {
    raw(
        emitter,
        &[T_FILLED_V2, ORDER_HASH, MAKER, TAKER_WALLET],
        &[
            side, TOKEN_A, amounts[0], amounts[1], amounts[2], BUILDER, ZERO,
        ],
    )
}

fn v2_buy() -> RawLog {
    v2(
        V2_CTF,
        ZERO,
        [
            "00000000000000000000000000000000000000000000000000000000075bb290", // 123_450_000
            "0000000000000000000000000000000000000000000000000000000008f0d180", // 150_000_000
            "000000000000000000000000000000000000000000000000000000000012d644", // fee 1_234_500
        ],
    )
}

fn v2_sell() -> RawLog {
    v2(
        V2_NEG_RISK,
        ONE,
        [
            "0000000000000000000000000000000000000000000000000000000002625a00", // 40_000_000
            "000000000000000000000000000000000000000000000000000000000243d580", // 38_000_000
            ZERO,
        ],
    )
}

fn fill(log: &RawLog) -> Fill {
    match decode(log, &Allowlist::default()) {
        Ok(Some(f)) => f,
        other => panic!("expected a fill, got {other:?}"),
    }
}

fn err(log: &RawLog) -> DecodeError {
    match decode(log, &Allowlist::default()) {
        Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn units(f: &Fill) -> [String; 3] {
    [f.shares, f.collateral, f.fee].map(format_units6)
}
