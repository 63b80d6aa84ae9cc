//! The chain, behind one module: the only place that knows ethers. New heads over WebSocket
//! (`eth_subscribe newHeads`), blocks and logs over HTTP, from one or several providers. Every
//! call is bounded by a timeout; reconnection is owned by the caller (ethers' own WS reconnect
//! budget is finite and silent). With several providers ([`crate::providers`]) a call goes to
//! the first in the pool's order; an error, a timeout or "not there" (`null`, "block not
//! found") moves it to the next, and a hedged call (logs of a block by hash, on the ingest path)
//! also goes to the next once the first has taken longer than its observed p95. The first answer
//! wins. "Not there" from every provider is `None` (blocks) or [`ChainError::NotFound`] (logs):
//! never a verdict that the block is not canonical. With a quorum above 1 ([`quorum`]), blocks,
//! `finalized` and log ranges are what at least the quorum of providers answer alike, and a
//! block's logs come only from providers that agree on its hash.

pub mod pending;
mod quorum;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ethers_core::types::{Block, BlockNumber, Filter, Log, H256, U64};
use ethers_providers::{Http, Middleware, Provider, Ws};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use pmw_core::redact;
use pmw_core::trade::RawLog;
use pmw_core::types::Address;
use pmw_core::UnixMs;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::ProviderUrls;
use crate::providers::{Kind, Pool};

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
    #[error("no provider has block {0} (yet)")]
    NotFound(String),
    #[error("no quorum on block {number}: {agree} of {asked} providers agree (quorum {quorum})")]
    NoQuorum {
        number: u64,
        agree: usize,
        asked: usize,
        quorum: usize,
    },
    #[error(
        "provider {provider} is on chain {got}, not the configured {want} (PMW_LIVE_CHAIN_ID)"
    )]
    WrongChain {
        provider: String,
        got: u64,
        want: u64,
    },
    #[error("no provider may be asked (every one is on another chain)")]
    NoProvider,
}

/// An `eth_getLogs` error that says the node does not have the block (yet): geth's `unknown
/// block`, erigon's and others' `block not found` / `header not found`.
fn says_not_found(e: &ChainError) -> bool {
    let ChainError::Rpc(text) = e else {
        return false;
    };
    let t = text.to_ascii_lowercase();
    t.contains("unknown block") || t.contains("not found")
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

/// HTTP access to the chain through every provider: head number, blocks by number, logs by
/// block hash or range.
#[derive(Clone)]
pub struct Chain {
    http: Arc<Vec<Provider<Http>>>,
    pool: Arc<Pool>,
    /// The chain id every provider must report (`None`: not checked).
    chain_id: Option<u64>,
}

impl Chain {
    /// One provider (`rpc`) at `http_url`.
    pub fn new(http_url: &str) -> Result<Chain, ChainError> {
        let one = ProviderUrls {
            name: "rpc".into(),
            ws_url: String::new(),
            http_url: http_url.into(),
        };
        Chain::with_providers(&[one], 1, 1)
    }

    /// Every provider of `urls`, demoted when more than `max_lag` blocks behind (or ahead of)
    /// the median head; `quorum` of them must agree on a block.
    pub fn with_providers(
        urls: &[ProviderUrls],
        max_lag: u64,
        quorum: usize,
    ) -> Result<Chain, ChainError> {
        let http = urls
            .iter()
            .map(|u| Provider::<Http>::try_from(u.http_url.as_str()).map_err(rpc_error))
            .collect::<Result<Vec<_>, _>>()?;
        let pool = Pool::new(
            urls.iter().map(|u| u.name.clone()).collect(),
            max_lag,
            quorum,
        );
        Ok(Chain {
            http: Arc::new(http),
            pool: Arc::new(pool),
            chain_id: None,
        })
    }

    /// Check every provider's chain id against `id` ([`Chain::check_chain`]).
    pub fn with_chain_id(mut self, id: u64) -> Chain {
        self.chain_id = Some(id);
        self
    }

    /// The providers' shared state (health, race, figures).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Ask the providers of `order` (see the module doc): the first `Some` answer, `None` when
    /// every one said "not there", else the last error.
    async fn ask<T, F, Fut>(
        &self,
        order: Vec<usize>,
        hedge: Option<Kind>,
        call: F,
    ) -> Result<Option<T>, ChainError>
    where
        F: Fn(Provider<Http>) -> Fut,
        Fut: Future<Output = Result<Option<T>, ChainError>>,
    {
        if order.is_empty() {
            return Err(ChainError::NoProvider);
        }
        let launch = |i: usize| {
            let fut = call(self.http[i].clone());
            async move {
                let t0 = Instant::now();
                (i, fut.await.map(|v| (v, t0.elapsed())))
            }
        };
        let mut running = FuturesUnordered::new();
        let mut next = 1;
        running.push(launch(order[0]));
        let mut hedge_at = hedge.map(|k| Instant::now() + self.pool.hedge_after(order[0], k));
        let mut last_err = None;
        loop {
            let hedging = hedge_at.filter(|_| next < order.len());
            tokio::select! {
                Some((i, r)) = running.next() => {
                    match r {
                        Ok((Some(v), took)) => {
                            self.pool.answered(i, hedge.unwrap_or(Kind::Block), took);
                            return Ok(Some(v));
                        }
                        Ok((None, _)) => self.pool.not_found(i, hedge.unwrap_or(Kind::Block)),
                        Err(e) if says_not_found(&e) => {
                            self.pool.not_found(i, hedge.unwrap_or(Kind::Block))
                        }
                        Err(e) => {
                            self.pool.failed(i);
                            tracing::debug!(provider = self.pool.name(i), error = %e, "rpc call failed; asking the next provider");
                            last_err = Some(e);
                        }
                    }
                    if next < order.len() {
                        running.push(launch(order[next]));
                        hedge_at = hedge.map(|k| Instant::now() + self.pool.hedge_after(order[next], k));
                        next += 1;
                    } else if running.is_empty() {
                        return last_err.map_or(Ok(None), Err);
                    }
                }
                _ = tokio::time::sleep_until(hedging.unwrap_or_else(Instant::now)), if hedging.is_some() => {
                    self.pool.hedged(order[next - 1]);
                    running.push(launch(order[next]));
                    hedge_at = hedge.map(|k| Instant::now() + self.pool.hedge_after(order[next], k));
                    next += 1;
                }
            }
        }
    }

    pub async fn head_number(&self) -> Result<u64, ChainError> {
        let n = self
            .ask(self.pool.order(), None, |p| async move {
                Ok(Some(bounded(p.get_block_number()).await?.as_u64()))
            })
            .await?;
        n.ok_or(ChainError::Incomplete("block number"))
    }

    /// The latest block header (of the leader, or the first provider that answers).
    pub async fn latest(&self) -> Result<Head, ChainError> {
        self.ask(self.pool.order(), None, |p| async move {
            latest_of(&p).await.map(Some)
        })
        .await?
        .ok_or(ChainError::Incomplete("latest block"))
    }

    /// The latest block header of provider `i` alone (its head poll).
    pub async fn latest_from(&self, i: usize) -> Result<Head, ChainError> {
        latest_of(&self.http[i]).await
    }

    /// The newest block the chain calls finalized (the `finalized` tag: Polygon's milestones),
    /// or `None` when no provider reports one yet.
    pub async fn finalized(&self) -> Result<Option<Head>, ChainError> {
        if self.pool.quorum() > 1 {
            return self.finalized_by_quorum().await;
        }
        self.ask(self.pool.order(), None, |p| async move {
            match bounded(p.get_block(BlockNumber::Finalized)).await? {
                Some(b) => Ok(Some(head_of(&b)?)),
                None => Ok(None),
            }
        })
        .await
    }

    /// The canonical block at `number` (the leader's, see [`crate::providers::health`]), or
    /// `None` if it is not there yet. Never hedged: a faster answer from another provider could
    /// be another branch's. When the leader fails, the next providers answer (it is demoted by
    /// then); when it answers `null` (its HTTP side lags), another provider's block is taken
    /// only if its parent is the leader's block below it (proven on the leader's branch),
    /// else it is not there yet.
    pub async fn block(&self, number: u64) -> Result<Option<Head>, ChainError> {
        if self.pool.quorum() > 1 {
            return self.block_by_quorum(number).await;
        }
        let order = self.pool.order();
        if order.is_empty() {
            return Err(ChainError::NoProvider);
        }
        let leader = self
            .ask(order[..1].to_vec(), None, |p| block_of(p, number))
            .await;
        let rest = order[1..].to_vec();
        match leader {
            Ok(Some(h)) => Ok(Some(h)),
            Ok(None) if rest.is_empty() => Ok(None),
            Err(e) if rest.is_empty() => Err(e),
            Err(_) => self.ask(rest, None, |p| block_of(p, number)).await,
            Ok(None) => {
                let Some(h) = self.ask(rest, None, |p| block_of(p, number)).await? else {
                    return Ok(None);
                };
                if number == 0 {
                    return Ok(Some(h));
                }
                let below = self
                    .ask(order[..1].to_vec(), None, |p| block_of(p, number - 1))
                    .await?;
                Ok(below.filter(|b| b.hash == h.parent_hash).map(|_| h))
            }
        }
    }

    /// [`Chain::logs_from`] any provider (tools and benches: one provider's word when the chain
    /// has a quorum of 1, the block's number unknown).
    pub async fn logs(
        &self,
        block_hash: &[u8; 32],
        addresses: &[Address],
        topic0s: &[[u8; 32]],
    ) -> Result<Vec<RawLog>, ChainError> {
        let all: Vec<usize> = (0..self.pool.len()).collect();
        self.logs_from(0, block_hash, &all, addresses, topic0s)
            .await
    }

    /// Logs of block `number` (by its hash, so a reorg cannot mix branches), only from `addresses` (any when empty) and
    /// only with one of `topic0s`, only from the providers `among` (those that agree on the
    /// hash, [`Chain::agreeing`]): with a quorum of 1 from the provider that announced it
    /// first, then the others (hedged at the provider's p95); above 1, the same logs from at
    /// least the quorum of them ([`Chain::ask_agreed`]). "Unknown block", or `[]` from a node that does not have
    /// the block, is "not there": the next provider is asked; from none, [`ChainError::NotFound`].
    pub async fn logs_from(
        &self,
        number: u64,
        block_hash: &[u8; 32],
        among: &[usize],
        addresses: &[Address],
        topic0s: &[[u8; 32]],
    ) -> Result<Vec<RawLog>, ChainError> {
        let filter = where_(
            Filter::new().at_block_hash(H256(*block_hash)),
            addresses,
            topic0s,
        );
        let filter = &filter;
        let mut order = self.pool.order_for(block_hash);
        order.retain(|i| among.contains(i));
        let call = |p: Provider<Http>| async move {
            let logs = bounded(p.get_logs(filter)).await?;
            // Some nodes answer `[]` for a block hash they do not know: an empty answer
            // counts only from a node that has the block.
            if logs.is_empty() && bounded(p.get_block(H256(*block_hash))).await?.is_none() {
                return Ok(None);
            }
            logs.iter()
                .map(raw_log)
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        };
        let found = if self.pool.quorum() > 1 {
            // Agreeing on the hash is not agreeing on what the block holds: a provider could
            // add a fill to a block everyone agrees on. Its logs too need the quorum's word.
            self.ask_agreed(number, order, Kind::Logs, call).await?
        } else {
            self.ask(order, Some(Kind::Logs), call).await?
        };
        found.ok_or_else(|| ChainError::NotFound(hex32(block_hash)))
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
        let filter = where_(
            Filter::new().from_block(from).to_block(to),
            addresses,
            topic0s,
        );
        let filter = &filter;
        if self.pool.quorum() > 1 {
            return self.range_by_quorum(to, filter).await;
        }
        self.ask(self.pool.order(), None, |p| async move {
            let logs = bounded(p.get_logs(filter)).await?;
            logs.iter().map(raw_log).collect::<Result<_, _>>().map(Some)
        })
        .await?
        .ok_or_else(|| ChainError::NotFound(format!("range {from}-{to}")))
    }
}

async fn block_of(p: Provider<Http>, number: u64) -> Result<Option<Head>, ChainError> {
    match bounded(p.get_block(U64::from(number))).await? {
        Some(b) => Ok(Some(head_of(&b)?)),
        None => Ok(None),
    }
}

async fn latest_of(p: &Provider<Http>) -> Result<Head, ChainError> {
    let b = bounded(p.get_block(BlockNumber::Latest))
        .await?
        .ok_or(ChainError::Incomplete("latest block"))?;
    head_of(&b)
}

/// `filter` narrowed to logs with one of `topic0s`, from `addresses` (from any address when
/// empty: how ingest and the audit also see unlisted emitters, [`crate::emitters`]).
fn where_(filter: Filter, addresses: &[Address], topic0s: &[[u8; 32]]) -> Filter {
    let filter = filter.topic0(topic0s.iter().map(|t| H256(*t)).collect::<Vec<_>>());
    if addresses.is_empty() {
        return filter;
    }
    filter.address(
        addresses
            .iter()
            .map(|a| ethers_core::types::H160(a.0))
            .collect::<Vec<_>>(),
    )
}

/// Follow new heads of provider `index` over one WebSocket connection until it ends, sending
/// each head stamped on arrival. `on_connected` runs once the subscription is live. Returns `Ok`
/// when `tx` is closed, an error when the connection fails, ends, or stays silent for `stall`.
pub async fn follow_heads(
    ws_url: &str,
    index: usize,
    name: &str,
    tx: &mpsc::Sender<(usize, SeenHead)>,
    stall: Duration,
    on_connected: impl FnOnce(),
) -> Result<(), ChainError> {
    let provider = bounded(Provider::<Ws>::connect(ws_url)).await?;
    let mut stream = bounded(provider.subscribe_blocks()).await?;
    tracing::info!(provider = name, "block listener connected");
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
                if tx
                    .send((index, SeenHead { head, t_detect_ms }))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            Err(e) => tracing::warn!(error = %e, "ignoring malformed head"),
        }
    }
}
