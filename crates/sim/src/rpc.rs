//! Plain Ethereum JSON-RPC over HTTP (reqwest), with just the calls the simulator makes to
//! anvil: blocks, receipts, logs, `eth_sendTransaction` from unlocked dev accounts, and the
//! anvil/evm extensions (`anvil_setCode`, `anvil_reorg`, automine control).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use pmw_core::Address;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};

use crate::types::B256;

/// A JSON-RPC client for one endpoint.
#[derive(Debug)]
pub struct Rpc {
    http: reqwest::Client,
    url: String,
    next_id: AtomicU64,
}

/// A call answered with a JSON-RPC error object.
#[derive(Debug, thiserror::Error)]
#[error("{method}: JSON-RPC error {code}: {message}")]
pub struct RpcError {
    pub method: String,
    pub code: i64,
    pub message: String,
}

impl Rpc {
    pub fn new(url: &str) -> anyhow::Result<Rpc> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()?;
        Ok(Rpc {
            http,
            url: url.to_string(),
            next_id: AtomicU64::new(1),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls `method` with positional `params` and decodes the result.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<T> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("{method}: POST {}", self.url))?
            .error_for_status()
            .with_context(|| format!("{method}: HTTP status"))?
            .json()
            .await
            .with_context(|| format!("{method}: response is not JSON"))?;
        if let Some(err) = resp.get("error").filter(|e| !e.is_null()) {
            return Err(RpcError {
                method: method.to_string(),
                code: err["code"].as_i64().unwrap_or(0),
                message: err["message"].as_str().unwrap_or("").to_string(),
            }
            .into());
        }
        let result = resp.get("result").cloned().unwrap_or(Value::Null);
        serde_json::from_value(result).with_context(|| format!("{method}: unexpected result shape"))
    }

    pub async fn chain_id(&self) -> anyhow::Result<u64> {
        Ok(self.call::<Quantity>("eth_chainId", json!([])).await?.0)
    }

    pub async fn block_number(&self) -> anyhow::Result<u64> {
        Ok(self.call::<Quantity>("eth_blockNumber", json!([])).await?.0)
    }

    pub async fn accounts(&self) -> anyhow::Result<Vec<Address>> {
        self.call("eth_accounts", json!([])).await
    }

    /// Header and transaction hashes of block `number`.
    pub async fn block(&self, number: u64) -> anyhow::Result<Option<Block>> {
        self.call("eth_getBlockByNumber", json!([qty(number), false]))
            .await
    }

    pub async fn latest_block(&self) -> anyhow::Result<Block> {
        self.call::<Option<Block>>("eth_getBlockByNumber", json!(["latest", false]))
            .await?
            .ok_or_else(|| anyhow!("no latest block"))
    }

    pub async fn block_by_hash(&self, hash: &B256) -> anyhow::Result<Option<Block>> {
        self.call("eth_getBlockByHash", json!([hash, false])).await
    }

    /// Block `number` with its transactions' sender, recipient and input.
    pub async fn block_with_txs(&self, number: u64) -> anyhow::Result<Option<BlockWithTxs>> {
        self.call("eth_getBlockByNumber", json!([qty(number), true]))
            .await
    }

    pub async fn receipt(&self, tx: &B256) -> anyhow::Result<Option<Receipt>> {
        self.call("eth_getTransactionReceipt", json!([tx])).await
    }

    /// Polls for the receipt of `tx` until it exists or `timeout` passes.
    pub async fn wait_receipt(&self, tx: &B256, timeout: Duration) -> anyhow::Result<Receipt> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(r) = self.receipt(tx).await? {
                return Ok(r);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no receipt for {tx} after {timeout:?} (is the chain mining?)");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn send_transaction(&self, tx: &TxRequest) -> anyhow::Result<B256> {
        self.call("eth_sendTransaction", json!([tx])).await
    }

    /// The next nonce of `account`, counting its transactions in the pool.
    pub async fn pending_nonce(&self, account: &Address) -> anyhow::Result<u64> {
        let n: Quantity = self
            .call("eth_getTransactionCount", json!([account, "pending"]))
            .await?;
        Ok(n.0)
    }

    pub async fn gas_price(&self) -> anyhow::Result<u64> {
        Ok(self.call::<Quantity>("eth_gasPrice", json!([])).await?.0)
    }

    /// `anvil_dropTransaction`: removes a transaction from the pool (it is never mined).
    pub async fn drop_transaction(&self, tx: &B256) -> anyhow::Result<()> {
        self.call::<Value>("anvil_dropTransaction", json!([tx]))
            .await
            .map(drop)
    }

    /// `eth_getLogs` with a raw filter object.
    pub async fn logs(&self, filter: Value) -> anyhow::Result<Vec<Log>> {
        self.call("eth_getLogs", json!([filter])).await
    }

    pub async fn code(&self, address: &Address) -> anyhow::Result<Vec<u8>> {
        Ok(self
            .call::<Bytes>("eth_getCode", json!([address, "latest"]))
            .await?
            .0)
    }

    pub async fn set_code(&self, address: &Address, code: &[u8]) -> anyhow::Result<()> {
        self.call::<Value>("anvil_setCode", json!([address, Bytes(code.to_vec())]))
            .await
            .map(drop)
    }

    /// `anvil_setStorageAt`: writes one 32-byte storage word of a contract.
    pub async fn set_storage(
        &self,
        address: &Address,
        slot: u64,
        value: B256,
    ) -> anyhow::Result<()> {
        let slot = B256({
            let mut w = [0u8; 32];
            w[24..].copy_from_slice(&slot.to_be_bytes());
            w
        });
        self.call::<Value>("anvil_setStorageAt", json!([address, slot, value]))
            .await
            .map(drop)
    }

    pub async fn automine(&self) -> anyhow::Result<bool> {
        self.call("anvil_getAutomine", json!([])).await
    }

    pub async fn set_automine(&self, on: bool) -> anyhow::Result<()> {
        self.call::<Value>("evm_setAutomine", json!([on]))
            .await
            .map(drop)
    }

    /// Mines one block with whatever is pending.
    pub async fn mine(&self) -> anyhow::Result<()> {
        self.call::<Value>("evm_mine", json!([])).await.map(drop)
    }

    /// `anvil_reorg(depth, [[tx, blockOffset], …])`: drops the last `depth` blocks and mines
    /// `depth` new ones on their parent; each tx goes into the new block at its offset (0 =
    /// the first new block). The dropped blocks' transactions are not re-included.
    pub async fn anvil_reorg(&self, depth: u64, txs: &[(TxRequest, u64)]) -> anyhow::Result<()> {
        let pairs: Vec<Value> = txs.iter().map(|(tx, off)| json!([tx, off])).collect();
        self.call::<Value>("anvil_reorg", json!([depth, pairs]))
            .await
            .map(drop)
    }
}

/// A transaction for `eth_sendTransaction` (the node signs for `from`).
#[derive(Clone, Debug, Serialize)]
pub struct TxRequest {
    pub from: Address,
    pub to: Address,
    #[serde(rename = "input")]
    pub data: Bytes,
    pub gas: Quantity,
    /// Set to replace a pending transaction (same nonce, higher gas price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<Quantity>,
    #[serde(rename = "gasPrice", skip_serializing_if = "Option::is_none")]
    pub gas_price: Option<Quantity>,
}

/// A block header with its transaction hashes.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    pub number: Quantity,
    pub hash: B256,
    pub parent_hash: B256,
    pub timestamp: Quantity,
    pub transactions: Vec<B256>,
}

/// A block with full transactions.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockWithTxs {
    pub number: Quantity,
    pub hash: B256,
    pub parent_hash: B256,
    pub transactions: Vec<Tx>,
}

/// The fields of a mined transaction the simulator looks at.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tx {
    pub hash: B256,
    pub from: Address,
    pub to: Option<Address>,
    pub input: Bytes,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub transaction_hash: B256,
    pub transaction_index: Quantity,
    pub block_hash: B256,
    pub block_number: Quantity,
    pub status: Option<Quantity>,
    pub logs: Vec<Log>,
}

/// An event log as the node returns it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Log {
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
    pub block_number: Quantity,
    pub block_hash: B256,
    pub transaction_hash: B256,
    pub transaction_index: Quantity,
    pub log_index: Quantity,
    #[serde(default)]
    pub removed: bool,
}

/// A JSON-RPC quantity (`"0x1a"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity(pub u64);

/// `"0x…"` hex of `n`.
pub fn qty(n: u64) -> String {
    format!("0x{n:x}")
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&qty(self.0))
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let digits = s
            .strip_prefix("0x")
            .ok_or_else(|| serde::de::Error::custom("quantity without 0x"))?;
        u64::from_str_radix(digits, 16)
            .map(Quantity)
            .map_err(|e| serde::de::Error::custom(format!("bad quantity {s:?}: {e}")))
    }
}

/// JSON-RPC data (`"0x…"` bytes).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("0x{}", hex::encode(&self.0)))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let digits = s
            .strip_prefix("0x")
            .ok_or_else(|| serde::de::Error::custom("data without 0x"))?;
        hex::decode(digits)
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}
