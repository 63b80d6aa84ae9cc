//! The pending tier's life in Postgres (docs/SETTLEMENT.md, migration 0023): a task of its own,
//! fed by the mempool watcher ([`crate::mempool`]) through a bounded channel, that records each
//! settlement first seen pending (unless the ledger already holds it mined), notes each other
//! provider's first sighting, and on every new watermark ends the pending fills that will not
//! confirm ([`resolve`]). Confirmation itself happens in the block commit
//! (`sql/commit_block.sql`), never here.

use std::time::Duration;

use metrics::counter;
use pmw_core::pg::PgPool;
use pmw_core::trade::settle::{Call, Role, Settlement};
use pmw_core::trade::{format_units6, Allowlist, Side};
use pmw_core::types::Address;
use pmw_core::UnixMs;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::chain::pending::{PendingTx, Probe};
use crate::config::ProviderUrls;
use crate::mempool::{Sighting, Target, Watcher};

mod resolve;

/// Sightings waiting for the recorder, at most (the watcher counts and drops beyond).
pub const QUEUE: usize = 4096;
/// How often the recorder looks for a new watermark (the resolution runs on each).
const WATERMARK_POLL: Duration = Duration::from_millis(500);
/// Blocks a transaction stays unknown to every provider before it ends `dropped`.
pub const DROP_GRACE_BLOCKS: u64 = 3;
/// Blocks around the watermark a late sighting is looked up in the ledger.
const MINED_WINDOW: i64 = 1_000;

pub const RECORDED: &str = "pmw_live_pending_recorded_total";
pub const MINED_BEFORE_SEEN: &str = "pmw_live_pending_mined_before_seen_total";
pub const QUEUE_FULL: &str = "pmw_live_pending_queue_full_total";
pub const CONFIRMED: &str = "pmw_live_pending_confirmed_total";
pub const AMOUNT_MISMATCH: &str = "pmw_live_pending_amount_mismatch_total";
pub const VOIDED: &str = "pmw_live_pending_voided_total";
pub const STORE_ERRORS: &str = "pmw_live_pending_store_errors_total";
pub const OPEN: &str = "pmw_live_pending_open_txs";

/// The recorder's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub providers: Vec<ProviderUrls>,
    pub targets: Vec<Target>,
    pub chain_id: u64,
    /// A pending settlement not mined this many blocks after it was recorded is `expired`.
    pub expire_blocks: u64,
    /// Blocks a transaction must stay gone from every pool before it is `dropped`.
    pub drop_grace_blocks: u64,
}

/// The contracts settlements are sent to: every exchange of `allow` (to itself) and the fee
/// modules of `PMW_LIVE_MEMPOOL_FEE_MODULES` (`0x<module>=0x<exchange>`, spaces or commas).
pub fn targets(allow: &Allowlist, fee_modules: Option<&str>) -> Result<Vec<Target>, String> {
    let mut out: Vec<Target> = allow
        .addresses()
        .map(|a| Target {
            address: a,
            exchange: a,
        })
        .collect();
    let entries = fee_modules.unwrap_or("").split([' ', ',', '\n', '\t']);
    for entry in entries.filter(|e| !e.is_empty()) {
        let (module, exchange) = entry
            .split_once('=')
            .ok_or_else(|| format!("{entry}: not 0x<module>=0x<exchange>"))?;
        let module: Address = module.parse().map_err(|e| format!("{module}: {e}"))?;
        let exchange: Address = exchange.parse().map_err(|e| format!("{exchange}: {e}"))?;
        if !allow.contains(&exchange) {
            return Err(format!("{exchange}: not in the exchange list"));
        }
        out.push(Target {
            address: module,
            exchange,
        });
    }
    Ok(out)
}

/// Starts the watcher and the recorder under `stop`.
pub fn spawn(settings: Settings, pg: PgPool, stop: CancellationToken) -> Result<(), String> {
    let probe = Probe::new(&settings.providers).map_err(|e| e.to_string())?;
    for m in [
        RECORDED,
        MINED_BEFORE_SEEN,
        QUEUE_FULL,
        CONFIRMED,
        AMOUNT_MISMATCH,
        STORE_ERRORS,
    ] {
        counter!(m).increment(0);
    }
    let (tx, rx) = mpsc::channel(QUEUE);
    let watcher = Watcher {
        providers: settings.providers.clone(),
        targets: settings.targets.clone(),
        chain_id: settings.chain_id,
    };
    tokio::spawn(watcher.run(tx, stop.clone()));
    let recorder = Recorder {
        pg,
        probe,
        settings,
    };
    tokio::spawn(recorder.run(rx, stop));
    Ok(())
}

/// The task that stores what the watcher sees and ends what will not confirm.
#[derive(Clone)]
pub struct Recorder {
    pub pg: PgPool,
    pub probe: Probe,
    pub settings: Settings,
}

impl Recorder {
    /// Runs until `stop` or until the watcher's channel closes: records sightings, and (in a
    /// task of its own, so provider calls never hold a sighting up) resolves on each watermark.
    pub async fn run(self, mut rx: mpsc::Receiver<Sighting>, stop: CancellationToken) {
        let done = stop.child_token();
        let _stop_resolving = done.clone().drop_guard();
        let resolving = tokio::spawn(self.clone().resolving(done.clone()));
        loop {
            tokio::select! {
                s = rx.recv() => match s {
                    Some(s) => self.handle(s).await,
                    None => break,
                },
                _ = stop.cancelled() => break,
            }
        }
        done.cancel();
        let _ = resolving.await;
    }

    /// Resolves open pending settlements each time the ingest watermark moved, until `stop`.
    async fn resolving(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(WATERMARK_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resolved_at = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            if let Err(e) = self.resolve_if_moved(&mut resolved_at).await {
                counter!(STORE_ERRORS).increment(1);
                tracing::warn!(error = %e, "pending resolution failed; retried at the next watermark check");
            }
        }
    }

    async fn handle(&self, s: Sighting) {
        let done = match &s {
            Sighting::First { tx, settlement } => self.record(tx, settlement).await,
            Sighting::Again {
                hash,
                provider,
                seen_ms,
            } => self.again(*hash, *provider, *seen_ms).await,
        };
        if let Err(e) = done {
            counter!(STORE_ERRORS).increment(1);
            tracing::warn!(error = %e, "pending sighting not stored");
        }
    }

    fn provider_name(&self, i: usize) -> String {
        self.settings
            .providers
            .get(i)
            .map_or_else(|| i.to_string(), |p| p.name.clone())
    }

    /// Records a first sighting unless the ledger holds the transaction mined: the ledger head
    /// row FOR SHARE (waiting out a commit in flight), then the check in a new statement, then
    /// the insert, in one transaction.
    async fn record(&self, tx: &PendingTx, s: &Settlement) -> Result<(), String> {
        let exchange = self
            .settings
            .targets
            .iter()
            .find(|t| t.address == tx.to)
            .map_or(tx.to, |t| t.exchange);
        let fills = fill_rows(tx, s, exchange);
        let makers: Vec<String> = fills.iter().map(|f| f.maker.clone()).collect();
        let hash = hex32(&tx.hash);
        let mut c = self.pg.get().await.map_err(|e| e.to_string())?;
        let t = c.transaction().await.map_err(|e| e.to_string())?;
        let pg = |e: tokio_postgres::Error| pmw_core::pg::describe(&e);
        t.query_one(include_str!("sql/pending_lock.sql"), &[])
            .await
            .map_err(pg)?;
        let mined: bool = t
            .query_one(
                include_str!("sql/pending_mined.sql"),
                &[&hash, &makers, &MINED_WINDOW],
            )
            .await
            .map_err(pg)?
            .get(0);
        if mined {
            counter!(MINED_BEFORE_SEEN).increment(1);
            tracing::debug!(tx = %hash, "pending sighting of a mined settlement; not recorded");
            return Ok(());
        }
        let events: i64 = t
            .query_one(
                include_str!("sql/pending_record.sql"),
                &[
                    &hash,
                    &tx.from.to_lower_hex(),
                    &(tx.nonce as i64),
                    &tx.to.to_lower_hex(),
                    &tx.seen_ms.0,
                    &self.provider_name(tx.provider),
                    &tokio_postgres::types::Json(&fills),
                    &UnixMs::now().0,
                ],
            )
            .await
            .map_err(pg)?
            .get(0);
        t.commit().await.map_err(pg)?;
        counter!(RECORDED).increment(events as u64);
        tracing::debug!(tx = %hash, fills = events, "pending settlement recorded");
        Ok(())
    }

    async fn again(&self, hash: [u8; 32], provider: usize, seen_ms: UnixMs) -> Result<(), String> {
        let c = self.pg.get().await.map_err(|e| e.to_string())?;
        c.execute(
            include_str!("sql/pending_again.sql"),
            &[&hex32(&hash), &self.provider_name(provider), &seen_ms.0],
        )
        .await
        .map_err(|e| pmw_core::pg::describe(&e))?;
        Ok(())
    }

    /// Runs the resolution when the watermark moved since the last one (a reorg to another
    /// block of the same height is a move).
    async fn resolve_if_moved(&self, last: &mut Option<(i64, String)>) -> Result<(), String> {
        let c = self.pg.get().await.map_err(|e| e.to_string())?;
        let row = c
            .query_opt(
                "SELECT block_number, block_hash FROM ingest_cursor WHERE id = 1",
                &[],
            )
            .await
            .map_err(|e| pmw_core::pg::describe(&e))?;
        drop(c);
        let Some(watermark) = row.map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1))) else {
            return Ok(());
        };
        if last.as_ref() == Some(&watermark) {
            return Ok(());
        }
        resolve::resolve(self, watermark.0 as u64, &watermark.1).await?;
        *last = Some(watermark);
        Ok(())
    }
}

/// One fill as `pending_record.sql` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FillRow {
    pub fill_index: i32,
    pub order_hash: String,
    pub maker: String,
    pub taker: String,
    pub token_id: String,
    pub side: i16,
    pub making: String,
    pub taking: String,
    pub exchange: String,
}

/// The fills of `s` in emit order, each with the taker its `OrderFilled` will name: a match's
/// maker orders are filled against the taker order's maker, the taker order against the
/// exchange; `fillOrder(s)` fills against the sender.
pub fn fill_rows(tx: &PendingTx, s: &Settlement, exchange: Address) -> Vec<FillRow> {
    let matched = !matches!(s.call, Call::V1FillOrder | Call::V1FillOrders);
    let taker_maker = s
        .fills
        .iter()
        .find(|f| f.role == Role::Taker)
        .map(|f| f.order.maker);
    s.fills
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let taker = match (matched, f.role) {
                (false, _) => tx.from,
                (true, Role::Taker) => exchange,
                (true, Role::Maker) => taker_maker.unwrap_or(exchange),
            };
            FillRow {
                fill_index: i as i32,
                order_hash: hex32(&f.order.hash),
                maker: f.order.maker.to_lower_hex(),
                taker: taker.to_lower_hex(),
                token_id: f.order.token_id.to_string(),
                side: match f.order.side {
                    Side::Buy => 0,
                    Side::Sell => 1,
                },
                making: format_units6(f.making),
                taking: format_units6(f.taking),
                exchange: exchange.to_lower_hex(),
            }
        })
        .collect()
}

pub(crate) fn hex32(h: &[u8; 32]) -> String {
    format!("0x{}", hex::encode(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::trade::settle::{Order, PlannedFill};
    use pmw_core::trade::U256;

    fn fill(maker: u8, role: Role, side: Side, making: u64, taking: u64) -> PlannedFill {
        PlannedFill {
            order: Order {
                hash: [maker; 32],
                salt: U256::zero(),
                maker: Address([maker; 20]),
                signer: Address([maker; 20]),
                token_id: U256::from(7u64),
                maker_amount: U256::from(making),
                taker_amount: U256::from(taking),
                side,
            },
            role,
            making: U256::from(making),
            taking: U256::from(taking),
            fee: None,
        }
    }

    #[test]
    fn fills_name_the_taker_their_logs_will_name() {
        let tx = PendingTx {
            hash: [9; 32],
            from: Address([0x0f; 20]),
            nonce: 3,
            to: Address([0xfe; 20]),
            input: Vec::new(),
            provider: 0,
            seen_ms: UnixMs(1),
        };
        let exchange = Address([0xec; 20]);
        let matched = Settlement {
            call: Call::V1FeeModuleMatchOrders,
            condition_id: None,
            fills: vec![
                fill(1, Role::Maker, Side::Sell, 2_000_000, 1_000_000),
                fill(2, Role::Taker, Side::Buy, 1_000_000, 2_000_000),
            ],
        };
        let rows = fill_rows(&tx, &matched, exchange);
        let takers: Vec<&str> = rows.iter().map(|r| r.taker.as_str()).collect();
        let (taker_maker, exchange_hex) =
            (Address([2; 20]).to_lower_hex(), exchange.to_lower_hex());
        assert_eq!(takers, [taker_maker.as_str(), exchange_hex.as_str()]);
        assert_eq!((rows[0].side, rows[1].side), (1, 0));
        assert_eq!(
            (rows[0].making.as_str(), rows[0].taking.as_str()),
            ("2", "1")
        );
        assert_eq!(
            (rows[1].fill_index, rows[1].exchange.as_str()),
            (1, exchange_hex.as_str())
        );
        let direct = Settlement {
            call: Call::V1FillOrder,
            condition_id: None,
            fills: vec![fill(1, Role::Maker, Side::Buy, 500_000, 1_000_000)],
        };
        let rows = fill_rows(&tx, &direct, exchange);
        assert_eq!(
            rows[0].taker,
            tx.from.to_lower_hex(),
            "filled against the sender"
        );
    }

    #[test]
    fn fee_modules_are_targets_of_listed_exchanges_only() {
        let allow = Allowlist::polymarket();
        let exchange = allow.addresses().next().unwrap();
        let module = Address([0x56; 20]);
        let list = format!("{}={}", module.to_lower_hex(), exchange.to_lower_hex());
        let t = targets(&allow, Some(&list)).unwrap();
        assert_eq!(t.len(), allow.len() + 1);
        assert!(t.contains(&Target {
            address: module,
            exchange
        }));
        assert_eq!(targets(&allow, None).unwrap().len(), allow.len());
        let stranger = format!("{}={}", module.to_lower_hex(), module.to_lower_hex());
        assert!(targets(&allow, Some(&stranger)).is_err());
        assert!(targets(&allow, Some("0x12")).is_err());
    }
}
