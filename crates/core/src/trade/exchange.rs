//! Polymarket exchange knowledge: the exchange contracts, their ABI versions, the event topic0
//! hashes, and the emitter [`Allowlist`] that keeps look-alike logs from other contracts out.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::Address;

/// Which `OrderFilled` ABI an exchange contract emits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub enum AbiVersion {
    /// CTF Exchange V1: `makerAssetId`/`takerAssetId`, side implied by which asset is collateral.
    V1 = 1,
    /// CLOB V2 (live 2026-04-28): explicit `side`, single `tokenId`, `builder` and `metadata`.
    V2 = 2,
}

impl AbiVersion {
    /// 1 or 2, the form stored and shown to operators.
    pub const fn number(self) -> u8 {
        self as u8
    }

    /// topic0 of this version's `OrderFilled`.
    pub const fn order_filled_topic(self) -> [u8; 32] {
        match self {
            AbiVersion::V1 => ORDER_FILLED_V1,
            AbiVersion::V2 => ORDER_FILLED_V2,
        }
    }

    /// topic0 of this version's `OrdersMatched`.
    pub const fn orders_matched_topic(self) -> [u8; 32] {
        match self {
            AbiVersion::V1 => ORDERS_MATCHED_V1,
            AbiVersion::V2 => ORDERS_MATCHED_V2,
        }
    }

    /// Number of 32-byte words in this version's `OrderFilled` data (non-indexed fields).
    pub const fn order_filled_data_words(self) -> usize {
        match self {
            AbiVersion::V1 => 5,
            AbiVersion::V2 => 7,
        }
    }

    /// The version whose `OrderFilled` topic0 is `topic`, if any.
    pub fn of_order_filled_topic(topic: &[u8; 32]) -> Option<AbiVersion> {
        [AbiVersion::V1, AbiVersion::V2]
            .into_iter()
            .find(|v| v.order_filled_topic() == *topic)
    }
}

impl fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "V{}", self.number())
    }
}

impl From<AbiVersion> for u8 {
    fn from(v: AbiVersion) -> u8 {
        v.number()
    }
}

impl TryFrom<u8> for AbiVersion {
    type Error = AllowlistError;

    fn try_from(n: u8) -> Result<Self, Self::Error> {
        match n {
            1 => Ok(AbiVersion::V1),
            2 => Ok(AbiVersion::V2),
            other => Err(AllowlistError::UnknownVersion(other)),
        }
    }
}

/// Canonical signature of the V1 `OrderFilled` event.
pub const ORDER_FILLED_V1_SIGNATURE: &str =
    "OrderFilled(bytes32,address,address,uint256,uint256,uint256,uint256,uint256)";
/// Canonical signature of the V1 `OrdersMatched` event.
pub const ORDERS_MATCHED_V1_SIGNATURE: &str =
    "OrdersMatched(bytes32,address,uint256,uint256,uint256,uint256)";
/// Canonical signature of the V2 `OrderFilled` event.
pub const ORDER_FILLED_V2_SIGNATURE: &str =
    "OrderFilled(bytes32,address,address,uint8,uint256,uint256,uint256,uint256,bytes32,bytes32)";
/// Canonical signature of the V2 `OrdersMatched` event.
pub const ORDERS_MATCHED_V2_SIGNATURE: &str =
    "OrdersMatched(bytes32,address,uint8,uint256,uint256,uint256)";

/// keccak256 of [`ORDER_FILLED_V1_SIGNATURE`].
pub const ORDER_FILLED_V1: [u8; 32] =
    hex32("d0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6");
/// keccak256 of [`ORDERS_MATCHED_V1_SIGNATURE`].
pub const ORDERS_MATCHED_V1: [u8; 32] =
    hex32("63bf4d16b7fa898ef4c4b2b6d90fd201e9c56313b65638af6088d149d2ce956c");
/// keccak256 of [`ORDER_FILLED_V2_SIGNATURE`].
pub const ORDER_FILLED_V2: [u8; 32] =
    hex32("d543adfd945773f1a62f74f0ee55a5e3b9b1a28262980ba90b1a89f2ea84d8ee");
/// keccak256 of [`ORDERS_MATCHED_V2_SIGNATURE`].
pub const ORDERS_MATCHED_V2: [u8; 32] =
    hex32("174b3811690657c217184f89418266767c87e4805d09680c39fc9c031c0cab7c");

/// The topic0 values to request from `eth_getLogs` (both `OrderFilled` versions).
pub const ORDER_FILLED_TOPICS: [[u8; 32]; 2] = [ORDER_FILLED_V1, ORDER_FILLED_V2];

/// Every fill and match topic0 of both ABIs (`OrderFilled` and `OrdersMatched`, V1 and V2):
/// what ingest asks `eth_getLogs` for, from any address, so a contract outside the allowlist
/// that emits one is seen (an unlisted emitter: recorded, never decoded into a trade).
pub const WATCHED_TOPICS: [[u8; 32]; 4] = [
    ORDER_FILLED_V1,
    ORDER_FILLED_V2,
    ORDERS_MATCHED_V1,
    ORDERS_MATCHED_V2,
];

/// Whether `topic` is one of [`WATCHED_TOPICS`].
pub fn is_watched_topic(topic: &[u8; 32]) -> bool {
    WATCHED_TOPICS.contains(topic)
}

/// One Polymarket exchange contract on Polygon.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Exchange {
    pub name: &'static str,
    pub address: Address,
    pub version: AbiVersion,
    pub neg_risk: bool,
}

/// V1 CTF Exchange (from block 33605403).
pub const CTF_EXCHANGE_V1: Exchange = Exchange {
    name: "CTF Exchange V1",
    address: Address(hex20("4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E")),
    version: AbiVersion::V1,
    neg_risk: false,
};
/// V1 NegRisk CTF Exchange (from block 50505492).
pub const NEG_RISK_EXCHANGE_V1: Exchange = Exchange {
    name: "NegRisk CTF Exchange V1",
    address: Address(hex20("C5d563A36AE78145C45a50134d48A1215220f80a")),
    version: AbiVersion::V1,
    neg_risk: true,
};
/// V2 CTF Exchange (CLOB V2, live 2026-04-28).
pub const CTF_EXCHANGE_V2: Exchange = Exchange {
    name: "CTF Exchange V2",
    address: Address(hex20("E111180000d2663C0091e4f400237545B87B996B")),
    version: AbiVersion::V2,
    neg_risk: false,
};
/// V2 NegRisk CTF Exchange (CLOB V2, live 2026-04-28).
pub const NEG_RISK_EXCHANGE_V2: Exchange = Exchange {
    name: "NegRisk CTF Exchange V2",
    address: Address(hex20("e2222d279d744050d28e00520010520000310F59")),
    version: AbiVersion::V2,
    neg_risk: true,
};

/// The four Polymarket exchanges on Polygon mainnet.
pub const POLYMARKET_EXCHANGES: [Exchange; 4] = [
    CTF_EXCHANGE_V1,
    NEG_RISK_EXCHANGE_V1,
    CTF_EXCHANGE_V2,
    NEG_RISK_EXCHANGE_V2,
];

/// Why an allowlist cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("exchange ABI version must be 1 or 2, got {0}")]
    UnknownVersion(u8),
    #[error("exchange list entry {0:?}: expected `0x<40 hex digits>=<1|2>`")]
    BadEntry(String),
    #[error("exchange {address} is listed as both {first} and {second}")]
    Conflict {
        address: Address,
        first: AbiVersion,
        second: AbiVersion,
    },
}

/// One allowlist entry as it appears in configuration: `{ address = "0x…", version = 1 }`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AllowlistEntry {
    pub address: Address,
    pub version: AbiVersion,
}

/// The exchange contracts whose logs are trusted, each with the ABI version it emits.
/// Anyone can emit a log with the `OrderFilled` topic; only these emitters count.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Allowlist {
    by_address: BTreeMap<Address, AbiVersion>,
}

impl Default for Allowlist {
    /// The four Polymarket exchanges on Polygon mainnet.
    fn default() -> Self {
        Allowlist::polymarket()
    }
}

impl Allowlist {
    /// The four Polymarket exchanges on Polygon mainnet.
    pub fn polymarket() -> Allowlist {
        Allowlist {
            by_address: POLYMARKET_EXCHANGES
                .iter()
                .map(|e| (e.address, e.version))
                .collect(),
        }
    }

    /// An allowlist of exactly `entries` (other chains, local test chains). Listing the same
    /// address twice is fine if the version agrees; a disagreement is an error.
    pub fn new(
        entries: impl IntoIterator<Item = (Address, AbiVersion)>,
    ) -> Result<Allowlist, AllowlistError> {
        let mut by_address = BTreeMap::new();
        for (address, version) in entries {
            if let Some(first) = by_address.insert(address, version) {
                if first != version {
                    return Err(AllowlistError::Conflict {
                        address,
                        first,
                        second: version,
                    });
                }
            }
        }
        Ok(Allowlist { by_address })
    }

    /// [`Allowlist::new`] from configuration entries.
    pub fn from_entries(entries: &[AllowlistEntry]) -> Result<Allowlist, AllowlistError> {
        Allowlist::new(entries.iter().map(|e| (e.address, e.version)))
    }

    /// This list plus `extra` (`0x<address>=<version>` entries separated by whitespace or
    /// commas, e.g. `PMW_LIVE_EXTRA_EXCHANGES`): how an operator adds an exchange after
    /// checking it. An address already listed must keep its version.
    pub fn with_extra(&self, extra: &str) -> Result<Allowlist, AllowlistError> {
        let mut entries: Vec<(Address, AbiVersion)> = self.iter().collect();
        for entry in extra
            .split([' ', ',', '\n', '\t'])
            .filter(|e| !e.is_empty())
        {
            let bad = || AllowlistError::BadEntry(entry.to_string());
            let (address, version) = entry.split_once('=').ok_or_else(bad)?;
            let address: Address = address.parse().map_err(|_| bad())?;
            let version: u8 = version.parse().map_err(|_| bad())?;
            entries.push((address, AbiVersion::try_from(version)?));
        }
        Allowlist::new(entries)
    }

    /// Whether `address` is an allowlisted exchange.
    pub fn contains(&self, address: &Address) -> bool {
        self.by_address.contains_key(address)
    }

    /// The ABI version of `address`, or `None` when it is not an allowlisted exchange.
    pub fn version_of(&self, address: &Address) -> Option<AbiVersion> {
        self.by_address.get(address).copied()
    }

    /// Every allowlisted address, in byte order (for the `eth_getLogs` address filter).
    pub fn addresses(&self) -> impl Iterator<Item = Address> + '_ {
        self.by_address.keys().copied()
    }

    /// Every `(address, version)` pair, in address byte order.
    pub fn iter(&self) -> impl Iterator<Item = (Address, AbiVersion)> + '_ {
        self.by_address.iter().map(|(a, v)| (*a, *v))
    }

    pub fn len(&self) -> usize {
        self.by_address.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }
}

/// Compile-time hex decoding of a constant; a malformed literal fails the build, not a run.
const fn hex_nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("non-hex character in a constant"),
    }
}

const fn hex_array<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    assert!(b.len() == 2 * N, "hex constant has the wrong length");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = (hex_nibble(b[2 * i]) << 4) | hex_nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn hex32(s: &str) -> [u8; 32] {
    hex_array::<32>(s)
}

const fn hex20(s: &str) -> [u8; 20] {
    hex_array::<20>(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha3::{Digest, Keccak256};

    fn keccak(s: &str) -> [u8; 32] {
        Keccak256::digest(s.as_bytes()).into()
    }

    #[test]
    fn topic0_constants_are_keccak_of_the_canonical_signatures() {
        assert_eq!(keccak(ORDER_FILLED_V1_SIGNATURE), ORDER_FILLED_V1);
        assert_eq!(keccak(ORDERS_MATCHED_V1_SIGNATURE), ORDERS_MATCHED_V1);
        assert_eq!(keccak(ORDER_FILLED_V2_SIGNATURE), ORDER_FILLED_V2);
        assert_eq!(keccak(ORDERS_MATCHED_V2_SIGNATURE), ORDERS_MATCHED_V2);
        // The keccak itself, on a published vector (ERC-20 Transfer).
        assert_eq!(
            hex::encode(keccak("Transfer(address,address,uint256)")),
            "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
        );
    }

    #[test]
    fn exchange_addresses_match_their_eip55_spelling() {
        let spelled = [
            "0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E",
            "0xC5d563A36AE78145C45a50134d48A1215220f80a",
            "0xE111180000d2663C0091e4f400237545B87B996B",
            "0xe2222d279d744050d28e00520010520000310F59",
        ];
        for (e, s) in POLYMARKET_EXCHANGES.iter().zip(spelled) {
            // Parsing validates the EIP-55 checksum, so a typo in either form fails here.
            let parsed: Address = s.parse().unwrap_or_else(|err| panic!("{s}: {err}"));
            assert_eq!(e.address, parsed, "{}", e.name);
            assert_eq!(e.address.to_checksum(), s);
        }
        let versions: Vec<u8> = POLYMARKET_EXCHANGES
            .iter()
            .map(|e| e.version.number())
            .collect();
        assert_eq!(versions, [1, 1, 2, 2]);
    }

    #[test]
    fn default_allowlist_is_the_four_exchanges() {
        let a = Allowlist::default();
        assert_eq!(a.len(), 4);
        for e in POLYMARKET_EXCHANGES {
            assert_eq!(a.version_of(&e.address), Some(e.version));
        }
        assert_eq!(a.version_of(&Address::ZERO), None);
        assert_eq!(
            AbiVersion::of_order_filled_topic(&ORDER_FILLED_V2),
            Some(AbiVersion::V2)
        );
        assert_eq!(AbiVersion::of_order_filled_topic(&ORDERS_MATCHED_V1), None);
    }

    #[test]
    fn extra_exchanges_extend_the_list_and_bad_entries_are_refused() {
        let base = Allowlist::polymarket();
        let a = base
            .with_extra(" 0x5fbdb2315678afecb367f032d93f642f64180aa3=2,0xe3333700ca9d93003f00f0f71f8515005f6c00aa=2 ")
            .unwrap();
        assert_eq!(a.len(), 6);
        let added: Address = "0x5fbdb2315678afecb367f032d93f642f64180aa3"
            .parse()
            .unwrap();
        assert_eq!(a.version_of(&added), Some(AbiVersion::V2));
        assert!(a.contains(&CTF_EXCHANGE_V1.address));
        assert_eq!(base.with_extra("").unwrap(), base);
        for bad in [
            "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            "0x12=2",
            "0x5fbdb2315678afecb367f032d93f642f64180aa3=x",
        ] {
            assert!(
                matches!(base.with_extra(bad), Err(AllowlistError::BadEntry(_))),
                "{bad}"
            );
        }
        let clash = format!("{}=2", CTF_EXCHANGE_V1.address);
        assert!(matches!(
            base.with_extra(&clash),
            Err(AllowlistError::Conflict { .. })
        ));
        assert!(is_watched_topic(&ORDERS_MATCHED_V2) && !is_watched_topic(&[0; 32]));
    }

    #[test]
    fn allowlist_from_config_entries() {
        let json = r#"[{"address":"0x5fbdb2315678afecb367f032d93f642f64180aa3","version":2},
                       {"address":"0x5FbDB2315678afecb367f032d93F642f64180aa3","version":2}]"#;
        let entries: Vec<AllowlistEntry> = serde_json::from_str(json).unwrap();
        let a = Allowlist::from_entries(&entries).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a.version_of(&entries[0].address), Some(AbiVersion::V2));
        assert_eq!(
            a.version_of(&CTF_EXCHANGE_V1.address),
            None,
            "config replaces the default"
        );

        let bad: Result<Vec<AllowlistEntry>, _> = serde_json::from_str(
            r#"[{"address":"0x5fbdb2315678afecb367f032d93f642f64180aa3","version":3}]"#,
        );
        let msg = bad.unwrap_err().to_string();
        assert!(msg.contains("must be 1 or 2"), "{msg}");

        let addr = entries[0].address;
        let err = Allowlist::new([(addr, AbiVersion::V1), (addr, AbiVersion::V2)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "exchange 0x5fbdb2315678afecb367f032d93f642f64180aa3 is listed as both V1 and V2"
        );
    }
}
