//! The chain, behind one module: the only place that knows ethers. New heads over WebSocket
//! (`eth_subscribe newHeads`), blocks and logs over HTTP. Every call is bounded by a timeout;
//! reconnection is owned by the caller (ethers' own WS reconnect budget is finite and silent).

use std::time::Duration;

use ethers_core::types::{Block, BlockNumber, Filter, Log, H256, U64};
use ethers_providers::{Http, Middleware, Provider, Ws};
use futures::StreamExt;
use pmw_core::redact;
use pmw_core::trade::RawLog;
use pmw_core::types::Address;
use pmw_core::UnixMs;
use tokio::sync::mpsc;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A block header as pmw needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub number: u64,
    pub hash: [u8; 32],
    pub parent_hash: [u8; 32],
    /// Block timestamp in whole seconds, as the chain states it.
    pub timestamp: u64,
}

impl Head {
    pub fn hash_hex(&self) -> String {
        hex32(&self.hash)
    }

    pub fn parent_hex(&self) -> String {
        hex32(&self.parent_hash)
    }
}

/// A head as it arrived here, stamped with the local clock on arrival.
#[derive(Debug, Clone)]
pub struct SeenHead {
    pub head: Head,
    pub t_detect_ms: UnixMs,
}

/// `0x`-prefixed lowercase hex of a 32-byte hash.
pub fn hex32(h: &[u8; 32]) -> String {
    format!("0x{}", hex::encode(h))
}

#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("rpc: {0}")]
    Rpc(String),
    #[error("rpc call timed out after {0:?}")]
    Timeout(Duration),
    #[error("rpc returned an incomplete {0}")]
    Incomplete(&'static str),
}

/// An RPC error as kept: ethers' and reqwest's text names the URL, whose path or query often
/// holds the provider's key; [`redact::text`] cuts it down to the host.
fn rpc_error(e: impl std::fmt::Display) -> ChainError {
    ChainError::Rpc(redact::text(&e.to_string()))
}

async fn bounded<T, E: std::fmt::Display>(
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ChainError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(rpc_error(e)),
        Err(_) => Err(ChainError::Timeout(CALL_TIMEOUT)),
    }
}

fn head_of(b: &Block<H256>) -> Result<Head, ChainError> {
    Ok(Head {
        number: b
            .number
            .ok_or(ChainError::Incomplete("block (no number)"))?
            .as_u64(),
        hash: b.hash.ok_or(ChainError::Incomplete("block (no hash)"))?.0,
        parent_hash: b.parent_hash.0,
        timestamp: b.timestamp.low_u64(),
    })
}

fn raw_log(l: &Log) -> Result<RawLog, ChainError> {
    Ok(RawLog {
        address: Address(l.address.0),
        topics: l.topics.iter().map(|t| t.0).collect(),
        data: l.data.to_vec(),
        block_number: l
            .block_number
            .ok_or(ChainError::Incomplete("log (no block number)"))?
            .as_u64(),
        block_hash: l
            .block_hash
            .ok_or(ChainError::Incomplete("log (no block hash)"))?
            .0,
        tx_hash: l
            .transaction_hash
            .ok_or(ChainError::Incomplete("log (no tx hash)"))?
            .0,
        log_index: u32::try_from(
            l.log_index
                .ok_or(ChainError::Incomplete("log (no log index)"))?
                .low_u64(),
        )
        .map_err(|_| ChainError::Incomplete("log (log index out of range)"))?,
    })
}

/// HTTP access to the chain: head number, blocks by number, logs by block hash.
#[derive(Clone)]
pub struct Chain {
    http: Provider<Http>,
}

impl Chain {
    pub fn new(http_url: &str) -> Result<Chain, ChainError> {
        let http = Provider::<Http>::try_from(http_url).map_err(rpc_error)?;
        Ok(Chain { http })
    }

    pub async fn head_number(&self) -> Result<u64, ChainError> {
        Ok(bounded(self.http.get_block_number()).await?.as_u64())
    }

    /// The latest block header.
    pub async fn latest(&self) -> Result<Head, ChainError> {
        let b = bounded(self.http.get_block(BlockNumber::Latest))
            .await?
            .ok_or(ChainError::Incomplete("latest block"))?;
        head_of(&b)
    }

    /// The newest block the chain calls finalized (the `finalized` tag: Polygon's milestones),
    /// or `None` when the node reports none yet.
    pub async fn finalized(&self) -> Result<Option<Head>, ChainError> {
        match bounded(self.http.get_block(BlockNumber::Finalized)).await? {
            Some(b) => Ok(Some(head_of(&b)?)),
            None => Ok(None),
        }
    }

    /// The canonical block at `number`, or `None` if the chain is not there yet.
    pub async fn block(&self, number: u64) -> Result<Option<Head>, ChainError> {
        match bounded(self.http.get_block(U64::from(number))).await? {
            Some(b) => Ok(Some(head_of(&b)?)),
            None => Ok(None),
        }
    }

    /// Logs of one block (by hash, so a reorg cannot mix branches), only from `addresses` and
    /// only with one of `topic0s`.
    pub async fn logs(
        &self,
        block_hash: &[u8; 32],
        addresses: &[Address],
        topic0s: &[[u8; 32]],
    ) -> Result<Vec<RawLog>, ChainError> {
        let filter = Filter::new().at_block_hash(H256(*block_hash));
        self.logs_where(filter, addresses, topic0s).await
    }

    /// Logs of the canonical blocks `from..=to` (by range: what the completeness audit
    /// compares with the stored trades), only from `addresses` and with one of `topic0s`.
    pub async fn logs_in_range(
        &self,
        from: u64,
        to: u64,
        addresses: &[Address],
        topic0s: &[[u8; 32]],
    ) -> Result<Vec<RawLog>, ChainError> {
        let filter = Filter::new().from_block(from).to_block(to);
        self.logs_where(filter, addresses, topic0s).await
    }

    /// `eth_getLogs` for the blocks `filter` names, only from `addresses` and with one of
    /// `topic0s`.
    async fn logs_where(
        &self,
        filter: Filter,
        addresses: &[Address],
        topic0s: &[[u8; 32]],
    ) -> Result<Vec<RawLog>, ChainError> {
        let filter = filter
            .address(
                addresses
                    .iter()
                    .map(|a| ethers_core::types::H160(a.0))
                    .collect::<Vec<_>>(),
            )
            .topic0(topic0s.iter().map(|t| H256(*t)).collect::<Vec<_>>());
        let logs = bounded(self.http.get_logs(&filter)).await?;
        logs.iter().map(raw_log).collect()
    }
}

/// Follow new heads over one WebSocket connection until it ends, sending each head stamped on
/// arrival. `on_connected` runs once the subscription is live. Returns `Ok` when `tx` is closed,
/// an error when the connection fails, ends, or stays silent for `stall`.
pub async fn follow_heads(
    ws_url: &str,
    tx: &mpsc::Sender<SeenHead>,
    stall: Duration,
    on_connected: impl FnOnce(),
) -> Result<(), ChainError> {
    let provider = bounded(Provider::<Ws>::connect(ws_url)).await?;
    let mut stream = bounded(provider.subscribe_blocks()).await?;
    tracing::info!("block listener connected");
    on_connected();
    loop {
        let block = match tokio::time::timeout(stall, stream.next()).await {
            Ok(Some(b)) => b,
            Ok(None) => return Err(ChainError::Rpc("head subscription ended".into())),
            Err(_) => return Err(ChainError::Rpc(format!("no head for {stall:?}"))),
        };
        let t_detect_ms = UnixMs::now();
        match head_of(&block) {
            Ok(head) => {
                if tx.send(SeenHead { head, t_detect_ms }).await.is_err() {
                    return Ok(());
                }
            }
            Err(e) => tracing::warn!(error = %e, "ignoring malformed head"),
        }
    }
}
