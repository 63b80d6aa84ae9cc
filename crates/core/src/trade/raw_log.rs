//! [`RawLog`], an EVM log independent of any RPC library, and its parser from the JSON object
//! `eth_getLogs` returns.

use serde_json::Value;

use crate::types::Address;

/// One EVM log with its position in the chain.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RawLog {
    /// The contract that emitted the log.
    pub address: Address,
    pub topics: Vec<[u8; 32]>,
    pub data: Vec<u8>,
    pub block_number: u64,
    pub block_hash: [u8; 32],
    pub tx_hash: [u8; 32],
    /// Index of the log within its block.
    pub log_index: u32,
}

/// Why a JSON value is not a usable `eth_getLogs` log object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawLogError {
    #[error("RPC log is not a JSON object")]
    NotAnObject,
    #[error("RPC log has no \"{0}\" field")]
    Missing(&'static str),
    #[error("RPC log field \"{0}\" is null (a pending log: it has no block yet)")]
    Pending(&'static str),
    #[error("RPC log field \"{field}\" must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("RPC log field \"{field}\" must start with 0x")]
    MissingPrefix { field: &'static str },
    #[error("RPC log field \"{field}\" is not valid hex: {reason}")]
    BadHex { field: &'static str, reason: String },
    #[error(
        "RPC log field \"{field}\" must be {expected} bytes ({} hex digits after 0x), got {got_digits} hex digits",
        .expected * 2
    )]
    BadLength {
        field: &'static str,
        expected: usize,
        got_digits: usize,
    },
    #[error("RPC log field \"{field}\" = {value} does not fit in {max_bits} bits")]
    TooLarge {
        field: &'static str,
        value: String,
        max_bits: u32,
    },
}

impl RawLog {
    /// Parse one element of an `eth_getLogs` result:
    /// `{"address":"0x…","topics":["0x…",…],"data":"0x…","blockNumber":"0x…","blockHash":"0x…",
    /// "transactionHash":"0x…","logIndex":"0x…","removed":false,…}`.
    /// `removed` and any other field are ignored (reorgs are detected by parent hash, not by it).
    pub fn from_rpc_json(value: &Value) -> Result<RawLog, RawLogError> {
        let obj = value.as_object().ok_or(RawLogError::NotAnObject)?;
        let field = |name: &'static str| -> Result<&Value, RawLogError> {
            match obj.get(name) {
                None => Err(RawLogError::Missing(name)),
                Some(Value::Null) => Err(RawLogError::Pending(name)),
                Some(v) => Ok(v),
            }
        };
        let string = |name: &'static str| -> Result<&str, RawLogError> {
            field(name)?.as_str().ok_or(RawLogError::WrongType {
                field: name,
                expected: "a hex string",
            })
        };

        let address = Address(fixed::<20>("address", string("address")?)?);
        let topics = field("topics")?
            .as_array()
            .ok_or(RawLogError::WrongType {
                field: "topics",
                expected: "an array of hex strings",
            })?
            .iter()
            .map(|t| {
                let s = t.as_str().ok_or(RawLogError::WrongType {
                    field: "topics",
                    expected: "an array of hex strings",
                })?;
                fixed::<32>("topics", s)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let data = bytes("data", string("data")?)?;
        let block_number = quantity("blockNumber", string("blockNumber")?, 64)?;
        let block_hash = fixed::<32>("blockHash", string("blockHash")?)?;
        let tx_hash = fixed::<32>("transactionHash", string("transactionHash")?)?;
        let log_index_text = string("logIndex")?;
        let log_index = u32::try_from(quantity("logIndex", log_index_text, 32)?).map_err(|_| {
            RawLogError::TooLarge {
                field: "logIndex",
                value: log_index_text.to_string(),
                max_bits: 32,
            }
        })?;
        Ok(RawLog {
            address,
            topics,
            data,
            block_number,
            block_hash,
            tx_hash,
            log_index,
        })
    }
}

fn strip_0x<'a>(field: &'static str, s: &'a str) -> Result<&'a str, RawLogError> {
    s.strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or(RawLogError::MissingPrefix { field })
}

/// Hex byte string of any (even) length.
fn bytes(field: &'static str, s: &str) -> Result<Vec<u8>, RawLogError> {
    hex::decode(strip_0x(field, s)?).map_err(|e| RawLogError::BadHex {
        field,
        reason: e.to_string(),
    })
}

/// Hex byte string of exactly N bytes.
fn fixed<const N: usize>(field: &'static str, s: &str) -> Result<[u8; N], RawLogError> {
    let digits = strip_0x(field, s)?;
    if digits.len() != 2 * N {
        return Err(RawLogError::BadLength {
            field,
            expected: N,
            got_digits: digits.len(),
        });
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(digits, &mut out).map_err(|e| RawLogError::BadHex {
        field,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// JSON-RPC quantity ("0x1b4"): hex digits, at least one. Leading zeros are tolerated.
fn quantity(field: &'static str, s: &str, max_bits: u32) -> Result<u64, RawLogError> {
    let digits = strip_0x(field, s)?;
    if digits.is_empty() {
        return Err(RawLogError::BadHex {
            field,
            reason: "no digits after 0x".into(),
        });
    }
    if let Some(c) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(RawLogError::BadHex {
            field,
            reason: format!("invalid character {c:?}"),
        });
    }
    let too_large = || RawLogError::TooLarge {
        field,
        value: s.to_string(),
        max_bits,
    };
    let significant = digits.trim_start_matches('0');
    if significant.len() > 16 {
        return Err(too_large());
    }
    if significant.is_empty() {
        return Ok(0);
    }
    let value = u64::from_str_radix(significant, 16).map_err(|_| too_large())?;
    if max_bits < 64 && value >> max_bits != 0 {
        return Err(too_large());
    }
    Ok(value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A real Polygon log (V1 CTF Exchange `OrderFilled`, tx 0x31d5dca4…), as eth_getLogs
    /// returns it, including fields the parser ignores.
    pub(crate) const REAL_V1_LOG: &str = r#"{"address":"0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e","topics":["0xd0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6","0xcad66ce0a358cde360f7565f226a7749c1fa08648b57ec3ffd0bf6c0f8a46b8b","0x00000000000000000000000000000003a358014c7c0e227483dbe01619871000","0x000000000000000000000000e55b90febea370d4611a4b0a9ff201183268b24e"],"data":"0x0000000000000000000000000000000000000000000000000000000000000000fdee4e7856e0a259cea17232d8e548f7309655d49c1eac7fe5813a188c3b4b2c0000000000000000000000000000000000000000000000000000000000716f1000000000000000000000000000000000000000000000000000000000010e14a000000000000000000000000000000000000000000000000000000000001b0210","blockNumber":"0x4d93911","transactionHash":"0x31d5dca405136cb4ed09bcf817d2b6c2ce1331b18d4b5738eae2e76f7e73e391","transactionIndex":"0x64","blockHash":"0xc3f40fe4974c608f80d6e9ddca33c61bddc2c6bee0e95f8e6efac8f65a53d26e","blockTimestamp":"0x695e9f3d","logIndex":"0x54d","removed":false}"#;

    fn real() -> Value {
        serde_json::from_str(REAL_V1_LOG).unwrap()
    }

    #[test]
    fn parses_a_real_eth_get_logs_object() {
        let log = RawLog::from_rpc_json(&real()).unwrap();
        assert_eq!(
            log.address.to_lower_hex(),
            "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e"
        );
        assert_eq!(log.topics.len(), 4);
        assert_eq!(log.topics[0][..4], [0xd0, 0xa0, 0x8e, 0x8c]);
        assert_eq!(log.topics[3][31], 0x4e);
        assert_eq!(log.data.len(), 5 * 32);
        assert_eq!(log.data[5 * 32 - 1], 0x10);
        assert_eq!(log.block_number, 81_344_785);
        assert_eq!(log.log_index, 1357);
        assert_eq!(log.block_hash[0], 0xc3);
        assert_eq!(log.block_hash[31], 0x6e);
        assert_eq!(log.tx_hash[0], 0x31);
        assert_eq!(log.tx_hash[31], 0x91);
    }

    #[test]
    fn removed_and_checksummed_address_are_accepted() {
        let mut v = real();
        v["removed"] = json!(true);
        v["address"] = json!("0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E");
        v["data"] = json!("0x");
        v["topics"] = json!([]);
        v["logIndex"] = json!("0x0");
        let log = RawLog::from_rpc_json(&v).unwrap();
        assert!(log.data.is_empty() && log.topics.is_empty());
        assert_eq!(log.log_index, 0);
    }

    fn err_after(edit: impl FnOnce(&mut Value)) -> String {
        let mut v = real();
        edit(&mut v);
        RawLog::from_rpc_json(&v).unwrap_err().to_string()
    }

    #[test]
    fn clear_errors_for_malformed_objects() {
        assert_eq!(
            RawLog::from_rpc_json(&json!([1])).unwrap_err(),
            RawLogError::NotAnObject
        );
        let cases: Vec<(String, &str)> = vec![
            (
                err_after(|v| {
                    v.as_object_mut().unwrap().remove("data");
                }),
                "RPC log has no \"data\" field",
            ),
            (
                err_after(|v| v["blockNumber"] = Value::Null),
                "RPC log field \"blockNumber\" is null (a pending log: it has no block yet)",
            ),
            (
                err_after(|v| v["address"] = json!("0x4bfb41d5")),
                "RPC log field \"address\" must be 20 bytes (40 hex digits after 0x), got 8 hex digits",
            ),
            (
                err_after(|v| v["topics"] = json!(["0x12"])),
                "RPC log field \"topics\" must be 32 bytes (64 hex digits after 0x), got 2 hex digits",
            ),
            (
                err_after(|v| v["topics"] = json!("0x12")),
                "RPC log field \"topics\" must be an array of hex strings",
            ),
            (
                err_after(|v| v["data"] = json!("0xabc")),
                "RPC log field \"data\" is not valid hex: Odd number of digits",
            ),
            (
                err_after(|v| v["data"] = json!("abcd")),
                "RPC log field \"data\" must start with 0x",
            ),
            (
                err_after(|v| v["blockNumber"] = json!(81344785)),
                "RPC log field \"blockNumber\" must be a hex string",
            ),
            (
                err_after(|v| v["blockNumber"] = json!("0x")),
                "RPC log field \"blockNumber\" is not valid hex: no digits after 0x",
            ),
            (
                err_after(|v| v["logIndex"] = json!("0x1g")),
                "RPC log field \"logIndex\" is not valid hex: invalid character 'g'",
            ),
            (
                err_after(|v| v["logIndex"] = json!("0x100000000")),
                "RPC log field \"logIndex\" = 0x100000000 does not fit in 32 bits",
            ),
            (
                err_after(|v| v["blockNumber"] = json!("0x10000000000000000")),
                "RPC log field \"blockNumber\" = 0x10000000000000000 does not fit in 64 bits",
            ),
            (
                err_after(|v| v["blockHash"] = json!("0xzz")),
                "RPC log field \"blockHash\" must be 32 bytes (64 hex digits after 0x), got 2 hex digits",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        // Leading zeros in a quantity are tolerated, and the largest u64 fits.
        let mut v = real();
        v["blockNumber"] = json!("0x0000ffffffffffffffff");
        assert_eq!(RawLog::from_rpc_json(&v).unwrap().block_number, u64::MAX);
    }

    #[test]
    fn never_panics_on_truncated_strings() {
        let text = REAL_V1_LOG;
        for field in [
            "address",
            "data",
            "blockNumber",
            "blockHash",
            "transactionHash",
            "logIndex",
        ] {
            let full = real()[field].as_str().unwrap().to_string();
            // Cut at every char boundary, including inside "0x".
            for cut in 0..=full.len() {
                let mut v = real();
                v[field] = json!(&full[..cut]);
                let _ = RawLog::from_rpc_json(&v);
            }
        }
        // Cut the raw text anywhere: whatever parses as JSON must not panic the parser.
        for cut in 0..text.len() {
            if let Ok(v) = serde_json::from_str::<Value>(&text[..cut]) {
                let _ = RawLog::from_rpc_json(&v);
            }
        }
    }
}
