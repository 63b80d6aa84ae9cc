//! The simulator handle: installs the emitters at the exchange addresses, sends planned matches
//! as `emitMatch` transactions from an unlocked anvil account, reads every receipt back and
//! records each emitted fill ([`Emitted`]), in memory and optionally in a JSON-lines report.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context};
use pmw_core::Address;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::abi::keccak256;
use crate::config::{RunConfig, SimConfig};
use crate::contracts::{Exchange, EXCHANGES};
use crate::emitted::{decode_order_filled, DecodedFill, Emitted, Report};
use crate::mempool::Settlement;
use crate::plan::{PlannedFill, PlannedMatch, Planner};
use crate::rpc::{Bytes, Quantity, Receipt, Rpc, TxRequest};
use crate::settle_call::settlement_call;
use crate::settlement::{self, FEE_MODULES};
use crate::types::{Role, B256};

/// How long to wait for a sent transaction's receipt.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The simulator. Cheap to clone: clones share the chain connection, the RNG and the record.
/// Batches and reorgs are serialized, so a [`Sim::spawn`]ed run and a [`Sim::reorg`] from a
/// test can be mixed.
#[derive(Clone, Debug)]
pub struct Sim {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rpc: Rpc,
    pub(crate) config: SimConfig,
    pub(crate) sender: Address,
    /// Every unlocked account of the node (settle mode sends replaced settlements from the
    /// others).
    pub(crate) accounts: Vec<Address>,
    /// The chain's id: the exchanges hash orders for it (settle mode).
    pub(crate) chain_id: u64,
    pub(crate) chain: Mutex<ChainState>,
    pub(crate) emitted: StdMutex<Vec<Emitted>>,
    /// Settle mode: every settlement sent and what it became.
    pub(crate) settlements: StdMutex<Vec<Settlement>>,
    pub(crate) report: StdMutex<Option<Report>>,
}

/// State that only changes under the chain lock.
#[derive(Debug)]
pub(crate) struct ChainState {
    pub(crate) planner: Planner,
    /// Transactions the simulator got mined, by hash, for replays in reorgs.
    pub(crate) sent: HashMap<B256, SentTx>,
    /// keccak(calldata) → match id, to recognise the simulator's matches in mined blocks.
    pub(crate) match_ids: HashMap<[u8; 32], u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct SentTx {
    pub(crate) to: Address,
    pub(crate) input: Vec<u8>,
    pub(crate) block_number: u64,
    pub(crate) block_hash: B256,
}

impl Sim {
    /// Connects to an anvil JSON-RPC endpoint with the default (demo) world.
    pub async fn connect(rpc_http_url: &str) -> anyhow::Result<Sim> {
        Sim::connect_with(rpc_http_url, SimConfig::default()).await
    }

    /// Connects with a given world.
    pub async fn connect_with(rpc_http_url: &str, config: SimConfig) -> anyhow::Result<Sim> {
        config.validate()?;
        let rpc = Rpc::new(rpc_http_url)?;
        let accounts = rpc
            .accounts()
            .await
            .context("eth_accounts (is anvil running?)")?;
        let sender = match config.sender {
            Some(s) => {
                ensure!(
                    accounts.contains(&s),
                    "sender {s} is not an unlocked account of the node"
                );
                s
            }
            None => *accounts
                .last()
                .ok_or_else(|| anyhow!("the node has no unlocked accounts"))?,
        };
        let planner = Planner::new(config.seed);
        let chain_id = rpc.chain_id().await.context("eth_chainId")?;
        Ok(Sim {
            inner: Arc::new(Inner {
                rpc,
                config,
                sender,
                accounts,
                chain_id,
                chain: Mutex::new(ChainState {
                    planner,
                    sent: HashMap::new(),
                    match_ids: HashMap::new(),
                }),
                emitted: StdMutex::new(Vec::new()),
                settlements: StdMutex::new(Vec::new()),
                report: StdMutex::new(None),
            }),
        })
    }

    /// Also append every record to `path` as JSON lines (see [`Report`]).
    pub fn set_report(&self, path: &Path) -> anyhow::Result<()> {
        *self.inner.report.lock().expect("report lock") = Some(Report::append_to(path)?);
        Ok(())
    }

    pub fn config(&self) -> &SimConfig {
        &self.inner.config
    }

    pub fn rpc(&self) -> &Rpc {
        &self.inner.rpc
    }

    /// The account that sends the simulator's transactions.
    pub fn sender(&self) -> Address {
        self.inner.sender
    }

    /// Installs the emitter runtime code at the four exchange addresses (`anvil_setCode`) and
    /// checks it is there. Idempotent.
    pub async fn install_emitters(&self) -> anyhow::Result<()> {
        let rpc = &self.inner.rpc;
        if self.inner.config.settle {
            settlement::install(rpc).await?;
            tracing::info!("settlement stand-ins installed at the exchanges and fee modules");
            return Ok(());
        }
        for ex in EXCHANGES {
            let code = &ex.version.artifact().runtime_code;
            rpc.set_code(&ex.address, code)
                .await
                .with_context(|| format!("anvil_setCode at {}", ex.address))?;
            let got = rpc.code(&ex.address).await?;
            ensure!(
                got == *code,
                "code at {} differs after anvil_setCode",
                ex.address
            );
        }
        tracing::info!("emitters installed at the four exchange addresses");
        Ok(())
    }

    /// Everything recorded so far, in chain order of recording; orphaned fills included.
    pub fn emitted(&self) -> Vec<Emitted> {
        self.inner.emitted.lock().expect("emitted lock").clone()
    }

    /// Settle mode: the settlements sent so far (with mempool behaviours configured) and what
    /// each became.
    pub fn settlements(&self) -> Vec<Settlement> {
        self.inner
            .settlements
            .lock()
            .expect("settlements lock")
            .clone()
    }

    /// The recorded fills that are on the canonical chain (not orphaned).
    pub fn canonical(&self) -> Vec<Emitted> {
        self.emitted().into_iter().filter(|e| !e.orphaned).collect()
    }

    /// Sends `n` matches one block after another (one match per batch) and returns their fills.
    pub async fn run_matches(&self, n: u64) -> anyhow::Result<Vec<Emitted>> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.extend(self.run_block(1).await?);
        }
        Ok(out)
    }

    /// Sends `n` matches together so that they land in one block, and returns their fills.
    /// On an automining chain automine is switched off for the batch and the batch mined with
    /// `evm_mine`; on an interval-mining chain the next block takes them (a batch that
    /// straddles a block boundary is recorded as mined).
    pub async fn run_block(&self, n: u32) -> anyhow::Result<Vec<Emitted>> {
        let mut state = self.inner.chain.lock().await;
        if self.inner.config.mempool_shares() > 0.0 {
            return self.run_settle_batch(&mut state, n).await;
        }
        let mut matches: Vec<PlannedMatch> = (0..n)
            .map(|_| state.planner.plan(&self.inner.config))
            .collect();
        let wires = matches
            .iter_mut()
            .map(|m| self.wire(m))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let hashes = self.send_all(&matches, &wires).await?;
        let mut out = Vec::new();
        for ((m, (to, input)), hash) in matches.iter().zip(wires).zip(&hashes) {
            let receipt = self.inner.rpc.wait_receipt(hash, RECEIPT_TIMEOUT).await?;
            let records = check_receipt(m, &receipt)?;
            state.match_ids.insert(keccak256(&input), m.id);
            state.sent.insert(
                *hash,
                SentTx {
                    to,
                    input,
                    block_number: receipt.block_number.0,
                    block_hash: receipt.block_hash,
                },
            );
            out.extend(records);
        }
        self.record(&out)?;
        Ok(out)
    }

    /// What a planned match is sent as, and where: `emitMatch` to its exchange's emitter, or
    /// in settle mode the real settlement call (which also fixes the fills' order hashes).
    pub(crate) fn wire(&self, m: &mut PlannedMatch) -> anyhow::Result<(Address, Vec<u8>)> {
        if !self.inner.config.settle {
            return Ok((m.exchange.address, m.calldata()));
        }
        let call = settlement_call(m, &self.inner.config, self.inner.chain_id)?;
        Ok((call.to, call.input))
    }

    async fn send_all(
        &self,
        matches: &[PlannedMatch],
        wires: &[(Address, Vec<u8>)],
    ) -> anyhow::Result<Vec<B256>> {
        let rpc = &self.inner.rpc;
        let batch_mine = matches.len() > 1 && rpc.automine().await.unwrap_or(false);
        if batch_mine {
            rpc.set_automine(false).await?;
        }
        let mut hashes = Vec::with_capacity(matches.len());
        let mut result = Ok(());
        for (m, (to, input)) in matches.iter().zip(wires) {
            match rpc
                .send_transaction(&self.tx_request(*to, input.clone(), m.makers.len() + 1))
                .await
            {
                Ok(h) => hashes.push(h),
                Err(e) => {
                    result = Err(e.context(format!("eth_sendTransaction for match {}", m.id)));
                    break;
                }
            }
        }
        if batch_mine {
            let mined = rpc.mine().await;
            rpc.set_automine(true).await?;
            mined?;
        }
        result.map(|()| hashes)
    }

    pub(crate) fn tx_request(&self, to: Address, input: Vec<u8>, fills: usize) -> TxRequest {
        // A settlement hashes and records every order (a fresh storage slot each).
        let (base, per_fill) = if self.inner.config.settle {
            (120_000, 80_000)
        } else {
            (60_000, 20_000)
        };
        TxRequest {
            from: self.inner.sender,
            to,
            data: Bytes(input),
            gas: Quantity(base + per_fill * fills as u64),
            nonce: None,
            gas_price: None,
        }
    }

    /// Appends records to the in-memory list and the report.
    pub(crate) fn record(&self, records: &[Emitted]) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.inner
            .emitted
            .lock()
            .expect("emitted lock")
            .extend_from_slice(records);
        if let Some(report) = self.inner.report.lock().expect("report lock").as_mut() {
            report.write(records)?;
        }
        Ok(())
    }

    /// Runs batches per `run` until its count or duration is reached or `cancel` fires (checked
    /// between batches: a batch in flight is finished and recorded). Returns the number of
    /// matches sent. An RPC failure ends the run with the error.
    pub fn spawn(
        &self,
        run: RunConfig,
        cancel: CancellationToken,
    ) -> JoinHandle<anyhow::Result<u64>> {
        let sim = self.clone();
        tokio::spawn(async move {
            ensure!(
                run.matches_per_block >= 1,
                "matches_per_block must be at least 1"
            );
            let started = tokio::time::Instant::now();
            let mut sent = 0u64;
            loop {
                let remaining = run.count.map_or(u64::MAX, |c| c.saturating_sub(sent));
                let expired = run.duration.is_some_and(|d| started.elapsed() >= d);
                if cancel.is_cancelled() || remaining == 0 || expired {
                    break;
                }
                let n = remaining.min(run.matches_per_block as u64) as u32;
                let fills = sim.run_block(n).await?;
                sent += n as u64;
                tracing::debug!(matches = n, fills = fills.len(), "batch mined");
                if !run.interval.is_zero() {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(run.interval) => {}
                    }
                }
            }
            Ok(sent)
        })
    }
}

/// Decodes the `OrderFilled` logs of a match's receipt into records and checks them against
/// the plan (order, owners, counterparties, sides, tokens, amounts, fees) and that the match
/// ends with `OrdersMatched`.
pub(crate) fn check_receipt(m: &PlannedMatch, receipt: &Receipt) -> anyhow::Result<Vec<Emitted>> {
    let tx = receipt.transaction_hash;
    ensure!(
        receipt.status.map(|s| s.0) == Some(1),
        "match {} tx {tx} reverted",
        m.id
    );
    let mut decoded = Vec::new();
    for log in &receipt.logs {
        if let Some(fill) = decode_order_filled(log)? {
            decoded.push((fill, log));
        }
    }
    let planned: Vec<&PlannedFill> = m.fills_in_log_order().collect();
    ensure!(
        decoded.len() == planned.len(),
        "match {} tx {tx}: {} OrderFilled logs, planned {}",
        m.id,
        decoded.len(),
        planned.len()
    );
    for ((got, _), want) in decoded.iter().zip(&planned) {
        check_fill(m, got, want).with_context(|| format!("match {} tx {tx}", m.id))?;
    }
    let last = receipt
        .logs
        .last()
        .ok_or_else(|| anyhow!("tx {tx} has no logs"))?;
    ensure!(
        last.topics.first() == Some(&m.exchange.version.orders_matched_topic()),
        "tx {tx}: last log is not OrdersMatched"
    );
    Ok(decoded
        .iter()
        .map(|(f, log)| f.record(log, Some(m.id)))
        .collect())
}

fn check_fill(m: &PlannedMatch, got: &DecodedFill, want: &PlannedFill) -> anyhow::Result<()> {
    let counterparty = match want.role {
        Role::Maker => m.taker.owner,
        Role::Taker => m.exchange.address,
    };
    let ok = got.exchange == m.exchange
        && got.order_hash == want.order_hash
        && got.maker == want.owner
        && got.taker == counterparty
        && got.role == want.role
        && got.side == want.side
        && got.token_id == want.token_id
        && got.shares == want.shares
        && got.collateral == want.collateral
        && got.fee == want.fee
        && (m.exchange.version == crate::types::Version::V1
            || (got.builder == want.builder && got.metadata == want.metadata));
    if !ok {
        bail!("emitted fill differs from the plan: got {got:?}, planned {want:?}");
    }
    Ok(())
}

/// The exchange a transaction settles on, if it calls one of the four or a fee module.
pub(crate) fn exchange_of(to: Option<Address>) -> Option<Exchange> {
    let to = to?;
    let to = FEE_MODULES
        .iter()
        .find(|f| f.address == to)
        .map_or(to, |f| f.exchange);
    Exchange::at(&to)
}
