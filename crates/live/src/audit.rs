//! The completeness audit: a task behind the live writer lock that re-reads every finalized
//! block range with `eth_getLogs` by block range (every fill and match topic of both ABIs from
//! any address: the allowlisted exchanges' fills, and unlisted emitters' logs, reported as
//! sightings and never stored as trades, [`crate::emitters`]), decodes the fills independently
//! of the ingest path and compares the set of (block hash, log index) with the stored,
//! non-retracted trades of those blocks.
//!
//! A fill missing from the store is backfilled (flagged `audit`, and `backfilled`: its
//! `t_detect_ms` is the audit's time, so latency figures leave it out); a stored fill the chain
//! does not have is retracted (a newer version with `retracted = 1`). Either correction fixes
//! the block's `chain_blocks.trade_count` and records a `reorgs` row with cause `audit`, so push
//! rewinds to the block below the lowest corrected one and delivers the ledger after it again:
//! the backfilled fill reaches its subscribers like any late trade, the retracted one as a
//! `retract`. Every range is recorded in `audit_ranges` and moves `audit_cursor`, both fenced.
//!
//! The RPC load is bounded: at most `PMW_LIVE_AUDIT_RANGE_BLOCKS` blocks per `eth_getLogs`, at
//! most `PMW_LIVE_AUDIT_MAX_RPS` calls per second. After downtime it catches up range by range,
//! in its own task: ingest never waits for it. A finalized block whose hash on the chain is not
//! the recorded one is an alarm (logged, counted): nothing is corrected and the audit stays there.

pub mod compare;

use std::collections::BTreeMap;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::ch::TradeRow;
use pmw_core::lock::{fence_sql, keys};
use pmw_core::pg::emitters::Source;
use pmw_core::pg::PgPool;
use pmw_core::trade::exchange::WATCHED_TOPICS;
use pmw_core::trade::{self, Allowlist, Fill, RawLog};
use pmw_core::UnixMs;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::chain::{hex32, Chain, ChainError};
use crate::config::AuditSettings;
use crate::error::IngestError;
use crate::notifier::BlockNotifier;
use crate::telemetry;
use crate::version::VersionFloor;
use compare::{compare, corrections, Findings, Key, Recorded};

/// `audit_ranges` rows are kept this long (the dashboard's longest window is 30 days).
const KEEP_RANGES_MS: i64 = 35 * 86_400_000;
/// How often old `audit_ranges` rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3_600);

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Io(#[from] IngestError),
    #[error("block {block}: the chain's hash {chain} is not the recorded {stored}: a finalized block disagrees, nothing corrected")]
    Disagrees {
        block: u64,
        stored: String,
        chain: String,
    },
    #[error("block {0} is not recorded in chain_blocks: cannot audit it")]
    Unrecorded(u64),
}

macro_rules! via_ingest_error {
    ($($t:ty),*) => {$(
        impl From<$t> for AuditError {
            fn from(e: $t) -> Self {
                AuditError::Io(e.into())
            }
        }
    )*};
}
via_ingest_error!(
    ChainError,
    clickhouse::error::Error,
    tokio_postgres::Error,
    deadpool_postgres::PoolError,
    pmw_core::pg::PgError
);

/// What one audited range found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RangeReport {
    pub from: u64,
    pub to: u64,
    /// Fills compared: the chain's, plus the stored ones the chain does not have.
    pub fills_checked: u64,
    /// `(block, log_index)` of the fills backfilled.
    pub missing: Vec<(u64, u32)>,
    /// `(block, log_index)` of the stored fills retracted.
    pub extra: Vec<(u64, u32)>,
    /// Blocks whose `trade_count` was corrected.
    pub recounted: Vec<u64>,
    /// The ingest watermark when the range was audited.
    pub head: u64,
}

/// At most one call per `gap`.
struct Pacer {
    gap: Duration,
    next: Instant,
}

impl Pacer {
    async fn wait(&mut self) {
        tokio::time::sleep_until(self.next).await;
        self.next = Instant::now() + self.gap;
    }
}

/// What the audit trusts (the exchange list) and where it reports the others (unlisted
/// emitters it finds in finalized blocks, [`crate::emitters`]).
pub struct Watch {
    pub allow: Allowlist,
    pub emitters: crate::emitters::Sink,
}

pub struct Audit {
    chain: Chain,
    pg: PgPool,
    ch: ChClient,
    allow: Allowlist,
    emitters: crate::emitters::Sink,
    lock_epoch: i64,
    settings: AuditSettings,
    notifier: BlockNotifier,
    pacer: Pacer,
    advance_sql: String,
    /// Versions written from now on are above this.
    versions: VersionFloor,
}

impl Audit {
    pub fn new(
        chain: Chain,
        pg: PgPool,
        ch: ChClient,
        watch: Watch,
        lock_epoch: i64,
        settings: AuditSettings,
        notifier: BlockNotifier,
    ) -> Audit {
        let advance_sql =
            include_str!("sql/advance_audit.sql").replace("{fence}", &fence_sql(keys::LIVE, "$3"));
        let gap = Duration::from_secs_f64(1.0 / settings.max_rps.max(0.001));
        Audit {
            chain,
            pg,
            ch,
            allow: watch.allow,
            emitters: watch.emitters,
            lock_epoch,
            settings,
            notifier,
            pacer: Pacer {
                gap,
                next: Instant::now(),
            },
            advance_sql,
            versions: VersionFloor::default(),
        }
    }

    /// Audit until `shutdown`: range after range while finalized blocks wait, then every
    /// `interval`. Failures are logged (once, then at debug) and retried after `interval`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut failing = false;
        let mut pruned_at: Option<Instant> = None;
        loop {
            let pause = match self.step().await {
                Ok(Some(_)) => {
                    failing = false;
                    Duration::ZERO
                }
                Ok(None) => {
                    failing = false;
                    self.settings.interval
                }
                Err(e) => {
                    telemetry::audit_failed(matches!(e, AuditError::Disagrees { .. }));
                    if !failing {
                        failing = true;
                        match e {
                            AuditError::Disagrees { .. } => {
                                tracing::error!(error = %e, "audit stopped at a finalized block the chain disagrees with")
                            }
                            _ => tracing::warn!(error = %e, "audit step failed; retrying"),
                        }
                    } else {
                        tracing::debug!(error = %e, "audit step failed again");
                    }
                    self.settings.interval
                }
            };
            if pruned_at.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                pruned_at = Some(Instant::now());
                if let Err(e) = self.prune().await {
                    tracing::warn!(error = %e, "audit_ranges prune failed");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Audit the next range of finalized blocks, if any: what it found.
    #[tracing::instrument(name = "audit", skip_all)]
    pub async fn step(&mut self) -> Result<Option<RangeReport>, AuditError> {
        let client = self.pg.get().await?;
        let state = client
            .query_one(include_str!("sql/audit_state.sql"), &[])
            .await?;
        let audited = state.get::<_, Option<i64>>(0).map(|n| n as u64);
        let (Some(finalized), Some(head), Some(lowest)) = (
            state.get::<_, Option<i64>>(1).map(|n| n as u64),
            state.get::<_, Option<i64>>(2).map(|n| n as u64),
            state.get::<_, Option<i64>>(3).map(|n| n as u64),
        ) else {
            return Ok(None);
        };
        let mut from = audited.map_or(lowest, |a| a + 1);
        if from < lowest {
            tracing::warn!(
                from,
                to = lowest - 1,
                "blocks pruned from chain_blocks before the audit reached them: not audited"
            );
            from = lowest;
        }
        if from > finalized {
            return Ok(None);
        }
        let to = finalized.min(from + self.settings.range_blocks - 1);
        let rows = client
            .query(
                include_str!("sql/audit_blocks.sql"),
                &[&(from as i64), &(to as i64)],
            )
            .await?;
        drop(client);
        // The recorded blocks, contiguous from `from` (ingest records them in order).
        let mut recorded = BTreeMap::new();
        for r in &rows {
            let n = r.get::<_, i64>(0) as u64;
            if n != from + recorded.len() as u64 {
                break;
            }
            recorded.insert(
                n,
                Recorded {
                    hash: r.get(1),
                    count: r.get(2),
                    time_ms: r.get(3),
                },
            );
        }
        let Some(to) = recorded.keys().next_back().copied() else {
            return Err(AuditError::Unrecorded(from));
        };
        let report = self.audit_range(from, to, &recorded, head).await?;
        Ok(Some(report))
    }

    /// Compare blocks `from..=to` (all in `recorded`) with the chain and correct the store.
    async fn audit_range(
        &mut self,
        from: u64,
        to: u64,
        recorded: &BTreeMap<u64, Recorded>,
        head: u64,
    ) -> Result<RangeReport, AuditError> {
        let logs = self.chain_logs(from, to, recorded).await?;
        let (logs, sightings) = crate::emitters::split(logs, &self.allow);
        let on_chain = decode_on_chain(&logs, recorded, &self.allow)?;
        let stored = {
            let c = self.pg.get().await?;
            pmw_core::pg::ledger::latest_versions_between(&**c, &self.ch, from, to)
                .await
                .map_err(ledger_error)?
        };
        let findings = compare(&on_chain, &stored, recorded);
        let now = UnixMs::now();
        let report = RangeReport {
            from,
            to,
            fills_checked: (on_chain.len() + findings.extra.len()) as u64,
            missing: findings.missing.clone(),
            extra: findings
                .extra
                .iter()
                .map(|&i| (stored[i].block_number, stored[i].log_index))
                .collect(),
            recounted: findings.recount.iter().copied().collect(),
            head,
        };
        let mut rows = Vec::new();
        if !findings.recount.is_empty() {
            let version = self.versions.next_now();
            rows = corrections(&findings, &on_chain, &stored, recorded, version, now.0);
            if let Some(top) = rows.iter().map(|r| r.version).max() {
                self.versions.raise(top);
            }
        }
        self.record(&report, recorded, &findings.counts, &rows, now)
            .await?;
        log_findings(&findings, &on_chain, &stored);
        self.emitters.saw(Source::Audit, sightings);
        if !findings.recount.is_empty() {
            tracing::warn!(blocks = ?report.recounted, ancestor = report.recounted[0].saturating_sub(1), "audit: trade counts corrected; push rewinds");
            self.notifier.notify(head);
        }
        telemetry::audited(telemetry::Audited {
            from,
            to,
            fills_checked: report.fills_checked,
            missing: report.missing.len() as u64,
            extra: report.extra.len() as u64,
            head,
        });
        tracing::debug!(
            from,
            to,
            fills = report.fills_checked,
            missing = report.missing.len(),
            extra = report.extra.len(),
            "range audited"
        );
        Ok(report)
    }

    /// The fill and match logs of blocks `from..=to` from any address (the exchanges' and
    /// unlisted emitters'), once the chain's block `to` is the recorded
    /// one: every block below it is then canonical too (ingest stored them linked by parent
    /// hash). Two paced RPC calls.
    async fn chain_logs(
        &mut self,
        from: u64,
        to: u64,
        recorded: &BTreeMap<u64, Recorded>,
    ) -> Result<Vec<RawLog>, AuditError> {
        self.pacer.wait().await;
        let logs = self
            .chain
            .logs_in_range(from, to, &[], &WATCHED_TOPICS)
            .await?;
        self.pacer.wait().await;
        let top = self
            .chain
            .block(to)
            .await?
            .ok_or(ChainError::Incomplete("audited block (not on the chain)"))?;
        if hex32(&top.hash) != recorded[&to].hash {
            return Err(disagrees(to, &top.hash, &recorded[&to].hash));
        }
        Ok(logs)
    }

    /// In one transaction fenced by the live lock: the corrections appended to the hot ledger,
    /// the audited watermark, the corrected counts and push's rewind (if any), and the range's
    /// row.
    async fn record(
        &self,
        report: &RangeReport,
        recorded: &BTreeMap<u64, Recorded>,
        counts: &BTreeMap<u64, i32>,
        rows: &[TradeRow],
        now: UnixMs,
    ) -> Result<(), AuditError> {
        let mut client = self.pg.get().await?;
        let tx = client.transaction().await?;
        crate::ingest::ledger::append(&tx, rows, now).await?;
        let moved = tx
            .execute(
                self.advance_sql.as_str(),
                &[&(report.to as i64), &now.0, &self.lock_epoch],
            )
            .await?;
        if moved != 1 {
            return Err(IngestError::Fenced.into());
        }
        for n in &report.recounted {
            let count = counts.get(n).copied().unwrap_or(0);
            tx.execute(
                include_str!("sql/audit_count.sql"),
                &[&(*n as i64), &recorded[n].hash, &count],
            )
            .await?;
        }
        if let Some(&lowest) = report.recounted.first() {
            let ancestor = lowest.saturating_sub(1);
            tx.execute(
                include_str!("sql/record_audit_rewind.sql"),
                &[
                    &(ancestor as i64),
                    &(report.head as i64),
                    &recorded[&lowest].hash,
                    &(report.head.saturating_sub(ancestor) as i32),
                    &now.0,
                ],
            )
            .await?;
        }
        tx.execute(
            include_str!("sql/record_audit_range.sql"),
            &[
                &(report.from as i64),
                &(report.to as i64),
                &(report.fills_checked as i32),
                &(report.missing.len() as i32),
                &(report.extra.len() as i32),
                &now.0,
                &(report.head as i64),
                &recorded[&report.to].time_ms,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Drop `audit_ranges` rows older than [`KEEP_RANGES_MS`].
    pub async fn prune(&self) -> Result<u64, AuditError> {
        let client = self.pg.get().await?;
        Ok(client
            .execute(
                include_str!("sql/prune_audit_ranges.sql"),
                &[&(UnixMs::now().0 - KEEP_RANGES_MS)],
            )
            .await?)
    }
}

fn ledger_error(e: pmw_core::pg::ledger::LedgerError) -> AuditError {
    match e {
        pmw_core::pg::ledger::LedgerError::Postgres(e) => e.into(),
        pmw_core::pg::ledger::LedgerError::ClickHouse(e) => e.into(),
    }
}

fn disagrees(block: u64, chain: &[u8; 32], stored: &str) -> AuditError {
    AuditError::Disagrees {
        block,
        stored: stored.to_string(),
        chain: hex32(chain),
    }
}

/// The fills of `logs` by key; a log of a block outside `recorded` is ignored, a log whose
/// block hash is not the recorded one is a disagreement.
fn decode_on_chain(
    logs: &[RawLog],
    recorded: &BTreeMap<u64, Recorded>,
    allow: &Allowlist,
) -> Result<BTreeMap<Key, Fill>, AuditError> {
    let mut on_chain = BTreeMap::new();
    for log in logs {
        let Some(rec) = recorded.get(&log.block_number) else {
            tracing::warn!(
                block = log.block_number,
                "log outside the audited range ignored"
            );
            continue;
        };
        if hex32(&log.block_hash) != rec.hash {
            return Err(disagrees(log.block_number, &log.block_hash, &rec.hash));
        }
        match trade::decode(log, allow) {
            Ok(Some(fill)) => {
                on_chain.insert((fill.block_number, fill.log_index), fill);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(block = log.block_number, log_index = log.log_index, error = %e, "undecodable log (audit)")
            }
        }
    }
    Ok(on_chain)
}

/// One warning per corrected fill.
fn log_findings(findings: &Findings, on_chain: &BTreeMap<Key, Fill>, stored: &[TradeRow]) {
    for f in findings.missing.iter().map(|k| &on_chain[k]) {
        tracing::warn!(
            block = f.block_number,
            log_index = f.log_index,
            block_hash = %hex32(&f.block_hash),
            "audit: fill missing from the store; backfilled"
        );
    }
    for r in findings.extra.iter().map(|&i| &stored[i]) {
        tracing::warn!(
            block = r.block_number,
            log_index = r.log_index,
            block_hash = %r.block_hash,
            "audit: stored fill not on the chain; retracted"
        );
    }
}
