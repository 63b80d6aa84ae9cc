//! The oracle, independent of pmw's code: raw JSON-RPC `eth_getLogs` over HTTP to anvil for the
//! run's range, both `OrderFilled` topics (V1 and V2), the four allowlisted exchange addresses
//! (docs: REFERENCES.md); a fill belongs to the wallet in `topics[2]` (maker).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::ws::Id;

const EXCHANGES: [&str; 4] = [
    "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e",
    "0xc5d563a36ae78145c45a50134d48a1215220f80a",
    "0xe111180000d2663c0091e4f400237545b87b996b",
    "0xe2222d279d744050d28e00520010520000310f59",
];
const ORDER_FILLED: [&str; 2] = [
    "0xd0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6",
    "0xd543adfd945773f1a62f74f0ee55a5e3b9b1a28262980ba90b1a89f2ea84d8ee",
];

pub async fn rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: Value,
) -> anyhow::Result<Value> {
    let v: Value = http
        .post(url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await?
        .json()
        .await?;
    if !v["error"].is_null() {
        bail!("{method}: {}", v["error"]);
    }
    Ok(v["result"].clone())
}

pub fn hex_u64(v: &Value) -> anyhow::Result<u64> {
    let s = v.as_str().context("hex string")?;
    Ok(u64::from_str_radix(s.trim_start_matches("0x"), 16)?)
}

/// The head's number.
pub async fn head(url: &str) -> anyhow::Result<u64> {
    hex_u64(&rpc(&reqwest::Client::new(), url, "eth_blockNumber", json!([])).await?)
}

/// The canonical chain's fills in (from, to]: maker (lowercase hex, no 0x) → identities.
pub async fn fills(
    url: &str,
    from: u64,
    to: u64,
) -> anyhow::Result<BTreeMap<String, BTreeSet<Id>>> {
    let http = reqwest::Client::new();
    let mut out: BTreeMap<String, BTreeSet<Id>> = BTreeMap::new();
    let mut a = from + 1;
    while a <= to {
        let b = (a + 999).min(to);
        let logs = rpc(
            &http,
            url,
            "eth_getLogs",
            json!([{
                "fromBlock": format!("0x{a:x}"),
                "toBlock": format!("0x{b:x}"),
                "address": EXCHANGES,
                "topics": [ORDER_FILLED],
            }]),
        )
        .await?;
        for l in logs.as_array().context("logs")? {
            if l["removed"] == Value::Bool(true) {
                continue;
            }
            let topics = l["topics"].as_array().context("topics")?;
            if topics.len() != 4 {
                continue;
            }
            let maker = topics[2].as_str().context("topic 2")?;
            let maker = maker[maker.len() - 40..].to_ascii_lowercase();
            let id = (
                hex_u64(&l["blockNumber"])?,
                hex_u64(&l["logIndex"])?,
                l["blockHash"]
                    .as_str()
                    .context("hash")?
                    .to_ascii_lowercase(),
            );
            out.entry(maker).or_default().insert(id);
        }
        a = b + 1;
    }
    Ok(out)
}
