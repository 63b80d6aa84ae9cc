//! The emitter contracts (artifacts compiled by `scripts/build-contracts` and embedded from
//! `contracts/out/`), the four Polymarket exchange addresses they are installed at, and the
//! canonical signatures and topics of the real exchange events.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use pmw_core::Address;
use serde::Deserialize;

use crate::abi;
use crate::types::{Version, B256};

/// V1 CTF Exchange on Polygon.
pub const V1_CTF_EXCHANGE: Address = addr("0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E");
/// V1 NegRisk CTF Exchange on Polygon.
pub const V1_NEG_RISK_EXCHANGE: Address = addr("0xC5d563A36AE78145C45a50134d48A1215220f80a");
/// V2 CTF Exchange on Polygon.
pub const V2_CTF_EXCHANGE: Address = addr("0xE111180000d2663C0091e4f400237545B87B996B");
/// V2 NegRisk CTF Exchange on Polygon.
pub const V2_NEG_RISK_EXCHANGE: Address = addr("0xe2222d279d744050d28e00520010520000310F59");

/// `OrderFilled` of the V1 exchanges.
pub const ORDER_FILLED_V1: &str =
    "OrderFilled(bytes32,address,address,uint256,uint256,uint256,uint256,uint256)";
/// `OrdersMatched` of the V1 exchanges.
pub const ORDERS_MATCHED_V1: &str =
    "OrdersMatched(bytes32,address,uint256,uint256,uint256,uint256)";
/// `OrderFilled` of the V2 exchanges (`side` is the `Side` enum, ABI type uint8).
pub const ORDER_FILLED_V2: &str =
    "OrderFilled(bytes32,address,address,uint8,uint256,uint256,uint256,uint256,bytes32,bytes32)";
/// `OrdersMatched` of the V2 exchanges: `(bytes32 indexed takerOrderHash, address indexed
/// takerOrderMaker, uint8 side, uint256 tokenId, uint256 makerAmountFilled, uint256
/// takerAmountFilled)`.
pub const ORDERS_MATCHED_V2: &str = "OrdersMatched(bytes32,address,uint8,uint256,uint256,uint256)";

/// `emitMatch(Fill takerFill, Fill[] makerFills)` of EmitterV1.
pub const EMIT_MATCH_V1: &str = "emitMatch((bytes32,address,uint256,uint256,uint256,uint256,uint256),(bytes32,address,uint256,uint256,uint256,uint256,uint256)[])";
/// `emitMatch(Fill takerFill, Fill[] makerFills)` of EmitterV2.
pub const EMIT_MATCH_V2: &str = "emitMatch((bytes32,address,uint8,uint256,uint256,uint256,uint256,bytes32,bytes32),(bytes32,address,uint8,uint256,uint256,uint256,uint256,bytes32,bytes32)[])";

/// One exchange contract: its ABI generation, whether it is the NegRisk one, its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Exchange {
    pub version: Version,
    pub neg_risk: bool,
    pub address: Address,
}

/// The four exchanges, V1 CTF, V1 NegRisk, V2 CTF, V2 NegRisk.
pub const EXCHANGES: [Exchange; 4] = [
    Exchange {
        version: Version::V1,
        neg_risk: false,
        address: V1_CTF_EXCHANGE,
    },
    Exchange {
        version: Version::V1,
        neg_risk: true,
        address: V1_NEG_RISK_EXCHANGE,
    },
    Exchange {
        version: Version::V2,
        neg_risk: false,
        address: V2_CTF_EXCHANGE,
    },
    Exchange {
        version: Version::V2,
        neg_risk: true,
        address: V2_NEG_RISK_EXCHANGE,
    },
];

impl Exchange {
    /// The exchange of a version and market kind.
    pub fn of(version: Version, neg_risk: bool) -> Exchange {
        *EXCHANGES
            .iter()
            .find(|e| e.version == version && e.neg_risk == neg_risk)
            .expect("all four combinations are listed")
    }

    /// The exchange at `address`, if it is one of the four.
    pub fn at(address: &Address) -> Option<Exchange> {
        EXCHANGES.iter().copied().find(|e| e.address == *address)
    }
}

impl Version {
    pub fn order_filled_signature(self) -> &'static str {
        match self {
            Version::V1 => ORDER_FILLED_V1,
            Version::V2 => ORDER_FILLED_V2,
        }
    }

    pub fn orders_matched_signature(self) -> &'static str {
        match self {
            Version::V1 => ORDERS_MATCHED_V1,
            Version::V2 => ORDERS_MATCHED_V2,
        }
    }

    pub fn order_filled_topic(self) -> B256 {
        abi::event_topic(self.order_filled_signature())
    }

    pub fn orders_matched_topic(self) -> B256 {
        abi::event_topic(self.orders_matched_signature())
    }

    /// Non-indexed words of `OrderFilled`: 5 for V1, 7 for V2.
    pub fn order_filled_data_words(self) -> usize {
        match self {
            Version::V1 => 5,
            Version::V2 => 7,
        }
    }

    pub fn emit_match_selector(self) -> [u8; 4] {
        abi::selector(match self {
            Version::V1 => EMIT_MATCH_V1,
            Version::V2 => EMIT_MATCH_V2,
        })
    }

    /// The compiled emitter of this version.
    pub fn artifact(self) -> &'static Artifact {
        static V1: OnceLock<Artifact> = OnceLock::new();
        static V2: OnceLock<Artifact> = OnceLock::new();
        match self {
            Version::V1 => V1.get_or_init(|| Artifact::parse(ARTIFACT_V1)),
            Version::V2 => V2.get_or_init(|| Artifact::parse(ARTIFACT_V2)),
        }
    }
}

const ARTIFACT_V1: &str = include_str!("../contracts/out/EmitterV1.json");
const ARTIFACT_V2: &str = include_str!("../contracts/out/EmitterV2.json");

/// A compiled emitter contract, as written by `scripts/build-contracts`.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub contract_name: String,
    /// Compiler version string (solcjs).
    pub solc: String,
    /// The ABI, as solc emitted it.
    pub abi: serde_json::Value,
    /// Function signature → selector hex, from solc.
    pub method_identifiers: BTreeMap<String, String>,
    /// The runtime code installed with `anvil_setCode`.
    pub runtime_code: Vec<u8>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawArtifact {
    contract_name: String,
    compiler: RawCompiler,
    abi: serde_json::Value,
    method_identifiers: BTreeMap<String, String>,
    deployed_bytecode: String,
}

#[derive(Deserialize)]
struct RawCompiler {
    solc: String,
}

impl Artifact {
    pub(crate) fn parse(json: &str) -> Artifact {
        let raw: RawArtifact = serde_json::from_str(json).expect("embedded artifact is valid JSON");
        let code = raw.deployed_bytecode.trim_start_matches("0x");
        Artifact {
            contract_name: raw.contract_name,
            solc: raw.compiler.solc,
            abi: raw.abi,
            method_identifiers: raw.method_identifiers,
            runtime_code: hex::decode(code).expect("embedded runtime bytecode is hex"),
        }
    }

    /// Canonical signatures of the events the ABI declares (e.g. `OrderFilled(bytes32,…)`),
    /// with each parameter's indexed flag.
    pub fn events(&self) -> Vec<(String, Vec<bool>)> {
        let items = self.abi.as_array().map(Vec::as_slice).unwrap_or_default();
        items
            .iter()
            .filter(|item| item["type"] == "event")
            .map(|item| {
                let inputs = item["inputs"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let types: Vec<&str> = inputs
                    .iter()
                    .map(|i| i["type"].as_str().unwrap_or("?"))
                    .collect();
                let indexed = inputs.iter().map(|i| i["indexed"] == true).collect();
                (
                    format!(
                        "{}({})",
                        item["name"].as_str().unwrap_or("?"),
                        types.join(",")
                    ),
                    indexed,
                )
            })
            .collect()
    }
}

/// Parses a `0x`-prefixed 40-digit hex address at compile time (case is not checked here;
/// a unit test checks the EIP-55 checksums).
pub(crate) const fn addr(s: &str) -> Address {
    let b = s.as_bytes();
    assert!(b.len() == 42 && b[0] == b'0' && b[1] == b'x');
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = nibble(b[2 + 2 * i]) << 4 | nibble(b[3 + 2 * i]);
        i += 1;
    }
    Address(out)
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_carry_valid_checksums() {
        for (s, a) in [
            (
                "0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E",
                V1_CTF_EXCHANGE,
            ),
            (
                "0xC5d563A36AE78145C45a50134d48A1215220f80a",
                V1_NEG_RISK_EXCHANGE,
            ),
            (
                "0xE111180000d2663C0091e4f400237545B87B996B",
                V2_CTF_EXCHANGE,
            ),
            (
                "0xe2222d279d744050d28e00520010520000310F59",
                V2_NEG_RISK_EXCHANGE,
            ),
        ] {
            assert_eq!(s.parse::<Address>().unwrap(), a, "{s}");
            assert_eq!(a.to_checksum(), s);
        }
    }

    #[test]
    fn exchange_lookup() {
        assert_eq!(
            Exchange::of(Version::V2, true).address,
            V2_NEG_RISK_EXCHANGE
        );
        assert_eq!(Exchange::at(&V1_CTF_EXCHANGE).unwrap().version, Version::V1);
        assert!(Exchange::at(&Address::ZERO).is_none());
    }
}
