//! Small value types of the simulator: 32-byte hashes, token ids (256-bit, rendered in
//! decimal like Polymarket's APIs), order sides, fill roles, exchange versions.

use std::fmt;
use std::str::FromStr;

use primitive_types::U256;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte value (block hash, tx hash, order hash, topic, bytes32 field). Rendered as
/// lowercase `0x…` hex, in full.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct B256(pub [u8; 32]);

impl B256 {
    pub const ZERO: B256 = B256([0u8; 32]);

    pub fn from_slice(bytes: &[u8]) -> Option<B256> {
        <[u8; 32]>::try_from(bytes).ok().map(B256)
    }
}

impl fmt::Display for B256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{}", hex::encode(self.0))
    }
}

impl fmt::Debug for B256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "B256(0x{})", hex::encode(self.0))
    }
}

impl FromStr for B256 {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix("0x")
            .ok_or("32-byte hex must start with 0x")?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(digits, &mut out)
            .map_err(|e| format!("bad 32-byte hex {s:?}: {e}"))?;
        Ok(B256(out))
    }
}

impl Serialize for B256 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for B256 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A CTF outcome token id (uint256). Serialized as a decimal string, the form Polymarket's
/// APIs (Gamma `clobTokenIds`, CLOB `token_id`) use.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TokenId(pub U256);

impl TokenId {
    pub fn from_be_bytes(bytes: &[u8; 32]) -> TokenId {
        TokenId(U256::from_big_endian(bytes))
    }

    pub fn to_be_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        self.0.to_big_endian(&mut out);
        out
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenId({})", self.0)
    }
}

impl FromStr for TokenId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("token id must be a decimal integer, got {s:?}"));
        }
        U256::from_dec_str(s)
            .map(TokenId)
            .map_err(|e| format!("bad token id {s:?}: {e:?}"))
    }
}

impl Serialize for TokenId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TokenId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The side of an order, from its owner's point of view. V2 encodes BUY = 0, SELL = 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn opposite(self) -> Side {
        match self {
            Side::Buy => Side::Sell,
            Side::Sell => Side::Buy,
        }
    }

    /// The V2 event's `uint8 side`.
    pub fn as_u8(self) -> u8 {
        match self {
            Side::Buy => 0,
            Side::Sell => 1,
        }
    }
}

/// Which order of a match a fill belongs to: a resting maker order, or the aggressor's taker
/// order (whose `OrderFilled` has the exchange as `taker`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Maker,
    Taker,
}

/// What a fill's fee is paid in. V1 BUY orders pay in outcome tokens, V1 SELL orders and every
/// V2 order in collateral.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeeAsset {
    Collateral,
    Shares,
}

/// Exchange ABI generation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_id_round_trips_in_decimal() {
        let s = "71321045679252212594626385532706912750332728571942532289631379312455583992563";
        let id: TokenId = s.parse().unwrap();
        assert_eq!(id.to_string(), s);
        assert_eq!(TokenId::from_be_bytes(&id.to_be_bytes()), id);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{s}\""));
        assert!("0x12".parse::<TokenId>().is_err());
    }

    #[test]
    fn b256_renders_full_hex() {
        let mut b = [0u8; 32];
        b[31] = 0xab;
        let h = B256(b);
        let s = h.to_string();
        assert_eq!(s.len(), 66);
        assert_eq!(s.parse::<B256>().unwrap(), h);
    }
}
