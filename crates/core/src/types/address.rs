//! 20-byte EVM address: strict parsing with EIP-55 checksum validation, lowercase rendering.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha3::{Digest, Keccak256};

/// An EVM address. Stored as 20 bytes, rendered as lowercase `0x…` hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address(pub [u8; 20]);

/// Why a string is not an acceptable address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("address must start with 0x")]
    MissingPrefix,
    #[error("address must have 40 hex digits after 0x, got {0}")]
    BadLength(usize),
    #[error("address contains a non-hex character at position {0}")]
    NotHex(usize),
    #[error("address has mixed case but fails its EIP-55 checksum (expected {expected})")]
    BadChecksum { expected: String },
}

impl Address {
    pub const ZERO: Address = Address([0u8; 20]);

    pub fn from_slice(bytes: &[u8]) -> Option<Address> {
        <[u8; 20]>::try_from(bytes).ok().map(Address)
    }

    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// Whether `s` is an address in the storage and wire form already: `0x` and 40 lowercase hex
    /// digits (what may be inlined into a statement; a checksummed form is not).
    pub fn is_lower_hex(s: &str) -> bool {
        s.len() == 42
            && s.starts_with("0x")
            && s[2..]
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }

    /// Lowercase `0x`-prefixed hex, the storage and wire form.
    pub fn to_lower_hex(&self) -> String {
        format!("0x{}", hex::encode(self.0))
    }

    /// The EIP-55 mixed-case checksum form.
    pub fn to_checksum(&self) -> String {
        let lower = hex::encode(self.0);
        let hash = Keccak256::digest(lower.as_bytes());
        let mut out = String::with_capacity(42);
        out.push_str("0x");
        for (i, c) in lower.chars().enumerate() {
            let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
            if c.is_ascii_alphabetic() && nibble >= 8 {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
        }
        out
    }
}

impl FromStr for Address {
    type Err = AddressError;

    /// Accepts all-lowercase or all-uppercase hex as is; mixed case must carry
    /// a valid EIP-55 checksum.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .ok_or(AddressError::MissingPrefix)?;
        if digits.len() != 40 {
            return Err(AddressError::BadLength(digits.len()));
        }
        if let Some(pos) = digits.bytes().position(|b| !b.is_ascii_hexdigit()) {
            return Err(AddressError::NotHex(pos + 2));
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| AddressError::NotHex(2))?;
        let addr = Address(bytes);
        let has_lower = digits.bytes().any(|b| b.is_ascii_lowercase());
        let has_upper = digits.bytes().any(|b| b.is_ascii_uppercase());
        if has_lower && has_upper {
            let expected = addr.to_checksum();
            if expected[2..] != *digits {
                return Err(AddressError::BadChecksum { expected });
            }
        }
        Ok(addr)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_lower_hex())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({})", self.to_lower_hex())
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_lower_hex())
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lowercase_storage_form_is_lower_hex() {
        let lower = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed";
        assert!(Address::is_lower_hex(lower));
        assert!(!Address::is_lower_hex(
            &lower.to_uppercase().replacen("0X", "0x", 1)
        ));
        assert!(!Address::is_lower_hex(
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        ));
        assert!(!Address::is_lower_hex(&lower[..41]));
        assert!(!Address::is_lower_hex(&format!("{lower}0")));
        assert!(!Address::is_lower_hex(&lower.replacen("0x", "1x", 1)));
        assert!(!Address::is_lower_hex(
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaeg"
        ));
        assert!(!Address::is_lower_hex(""));
    }

    // Test vectors published in EIP-55 itself.
    const EIP55_VECTORS: [&str; 8] = [
        "0x52908400098527886E0F7030069857D2E4169EE7",
        "0x8617E340B3D01FA5F11F306F4090FD50E238070D",
        "0xde709f2102306220921060314715629080e2fb77",
        "0x27b1fdb04752bbc536007a920d24acb045561c26",
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn eip55_vectors_parse_and_round_trip() {
        for v in EIP55_VECTORS {
            let a: Address = v.parse().unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(a.to_lower_hex(), v.to_lowercase());
            let mixed = v[2..].bytes().any(|b| b.is_ascii_lowercase())
                && v[2..].bytes().any(|b| b.is_ascii_uppercase());
            if mixed {
                assert_eq!(a.to_checksum(), v);
            }
        }
    }

    #[test]
    fn wrong_checksum_is_rejected() {
        // Flip the case of one letter of a valid checksummed address.
        let good = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
        let bad = "0x5aaeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
        match bad.parse::<Address>() {
            Err(AddressError::BadChecksum { expected }) => assert_eq!(expected, good),
            other => panic!("expected checksum error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_addresses_get_clear_errors() {
        assert_eq!(
            "5aaeb6053f3e94c9b9a09f33669435e7ef1beaed".parse::<Address>(),
            Err(AddressError::MissingPrefix)
        );
        assert_eq!(
            "0x5aaeb6053f".parse::<Address>(),
            Err(AddressError::BadLength(10))
        );
        assert_eq!(
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaedff".parse::<Address>(),
            Err(AddressError::BadLength(42))
        );
        assert_eq!(
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaeg".parse::<Address>(),
            Err(AddressError::NotHex(41))
        );
        assert!("".parse::<Address>().is_err());
        let msg = "0x12".parse::<Address>().unwrap_err().to_string();
        assert!(msg.contains("40 hex digits"), "{msg}");
    }

    #[test]
    fn single_case_forms_need_no_checksum() {
        let lower: Address = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"
            .parse()
            .unwrap();
        let upper: Address = "0x5AAEB6053F3E94C9B9A09F33669435E7EF1BEAED"
            .parse()
            .unwrap();
        assert_eq!(lower, upper);
        assert_eq!(lower.0[0], 0x5a);
        assert_eq!(lower.0[19], 0xed);
    }

    #[test]
    fn serde_uses_lowercase_and_validates() {
        let a: Address =
            serde_json::from_str("\"0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359\"").unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            "\"0xfb6916095ca1df60bb79ce92ce3ea74c37c5d359\""
        );
        assert!(
            serde_json::from_str::<Address>("\"0xfb6916095CA1df60bB79Ce92cE3Ea74c37c5d359\"")
                .is_err()
        );
    }
}
