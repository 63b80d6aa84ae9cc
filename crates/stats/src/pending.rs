//! The pending tier on the dashboard and in `/latency.json` (issue 43): per window, beside the
//! confirmed path's headline, seen-pending → pushed (WebSocket and webhook), the lead of the
//! pending over the confirming block's header (p50/p90), coverage (the share of delivered trades
//! that had a pending first) and how the pending fills that ended did (confirmed, or voided by
//! reason). The pushes, the lead and coverage come from ClickHouse `push_latency` (push's
//! recorder writes a row per pending pushed and per trade delivered, with the pending fill's
//! id; kept as long as the headline's rows); the ends come from Postgres' pending tables
//! (pmw-live's own record of every fill, not only delivered ones; the hot ledger's 24 h is not
//! needed: a fill's status is on the fill). With no pending data at all the tier is `off`: the
//! page says so instead of showing 0 % coverage.

use clickhouse::Row;
use pmw_core::ch::statements::{PENDING_COVERAGE, PENDING_LEAD, PENDING_PUSH};
use pmw_core::ch::ChClient;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};

use crate::error::StatsError;
use crate::model::{self, Bounds, NamedWindow};
use crate::snapshot::Percentiles;

mod render;
pub use render::render;

/// What the figures mean, stated in the JSON and on the page.
pub const PENDING_DEFINITION: &str = "seen → pushed: push_latency rows of channel ws_pending (a \
pending frame written to a session) or webhook_pending (a pending webhook delivered), t_push_ms − \
the fill's first sighting in a provider's pool (pending_txs.first_seen_ms). Lead over the header: \
per pending fill pushed and confirmed in the window, its trade's t_detect_ms (block header \
received) − the pending's first push (positive: the pending was out first). Coverage: the trades \
delivered live in the window (distinct ledger positions over WebSocket and webhook) that confirmed \
a pending fill. Ended: the pending fills that ended in the window (Postgres pending tables), \
confirmed or voided by reason";

/// The void reasons, in the order shown.
pub const REASONS: [&str; 4] = ["reverted", "replaced", "dropped", "expired"];

/// Whether the tier has produced anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Pending data in the 30-day window, or a fill open now.
    On,
    /// None at all: the mempool watcher is off (`PMW_LIVE_MEMPOOL`) or has never seen a
    /// settlement.
    #[default]
    Off,
}

/// The pending tier's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingReport {
    pub tier: Tier,
    pub definition: String,
    pub windows: Vec<PendingWindow>,
}

/// p50/p90 of the lead over the header (ms), over `count` fills; `None` when there are none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lead {
    pub count: u64,
    pub p50_ms: Option<i64>,
    pub p90_ms: Option<i64>,
}

/// Delivered trades and how many had a pending first; `share` is `None` with no trades, and
/// while the tier is off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoverageShare {
    pub trades: u64,
    pub with_pending: u64,
    pub share: Option<f64>,
}

/// One way of ending: its count and share of the fills that ended (`None` when none did).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndShare {
    pub reason: String,
    pub count: u64,
    pub share: Option<f64>,
}

/// The pending fills that ended in a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ends {
    pub count: u64,
    pub confirmed: u64,
    pub voided: u64,
    /// voided / count.
    pub void_share: Option<f64>,
    /// One entry per reason of [`REASONS`], in that order.
    pub voided_by_reason: Vec<EndShare>,
}

/// The pending figures of one dashboard window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingWindow {
    pub window: String,
    #[serde(flatten)]
    pub bounds: Bounds,
    /// First sighting in a pool → `pending` frame written (WebSocket).
    pub seen_push_ws: Percentiles,
    /// First sighting in a pool → `pending` webhook delivered.
    pub seen_push_webhook: Percentiles,
    pub lead_over_header: Lead,
    pub coverage: CoverageShare,
    pub ended: Ends,
}

impl PendingWindow {
    /// Whether anything of the tier lies in this window.
    fn has_data(&self) -> bool {
        self.seen_push_ws.count + self.seen_push_webhook.count + self.ended.count > 0
            || self.coverage.with_pending > 0
    }
}

#[derive(Debug, Row, Deserialize)]
struct PushAgg {
    channel: String,
    n: u64,
    q: Vec<i64>,
}

#[derive(Debug, Row, Deserialize)]
struct LeadAgg {
    n: u64,
    q: Vec<i64>,
}

#[derive(Debug, Row, Deserialize)]
struct CoverageAgg {
    n: u64,
    covered: u64,
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The pending figures as of `now`.
pub async fn report(ch: &ChClient, pg: &PgPool, now: UnixMs) -> Result<PendingReport, StatsError> {
    let c = pg.get().await.map_err(pmw_core::pg::PgError::from)?;
    let mut windows = Vec::new();
    for nw in model::windows(now) {
        let mut w = window(ch, nw).await?;
        w.ended = ends(&c, nw).await?;
        windows.push(w);
    }
    let open: bool = c
        .query_one(include_str!("sql/pending_open.sql"), &[])
        .await?
        .get(0);
    let tier = if open || windows.iter().any(PendingWindow::has_data) {
        Tier::On
    } else {
        // No pending data at all: coverage is not measured (no 0 % that reads as a failure).
        for w in &mut windows {
            w.coverage.share = None;
        }
        Tier::Off
    };
    Ok(PendingReport {
        tier,
        definition: PENDING_DEFINITION.into(),
        windows,
    })
}

/// The ClickHouse figures of one window (`ended` is Postgres', left empty here).
pub async fn window(ch: &ChClient, nw: NamedWindow) -> Result<PendingWindow, StatsError> {
    let w = nw.window;
    let sql = |s: &'static str| ch.query(s).bind(w.from_ms).bind(w.to_ms);
    let pushes: Vec<PushAgg> = sql(PENDING_PUSH).fetch_all().await?;
    let lead: LeadAgg = sql(PENDING_LEAD).fetch_one().await?;
    let cov: CoverageAgg = sql(PENDING_COVERAGE).fetch_one().await?;
    let of = |channel: &str| {
        pushes
            .iter()
            .find(|p| p.channel == channel)
            .map_or(Percentiles::EMPTY, |p| {
                Percentiles::from_quantiles(p.n, &p.q)
            })
    };
    let some = |i: usize| (lead.n > 0).then(|| lead.q.get(i).copied()).flatten();
    Ok(PendingWindow {
        window: nw.name.into(),
        bounds: Bounds::new(w.from_ms, w.to_ms),
        seen_push_ws: of("ws_pending"),
        seen_push_webhook: of("webhook_pending"),
        lead_over_header: Lead {
            count: lead.n,
            p50_ms: some(0),
            p90_ms: some(1),
        },
        coverage: CoverageShare {
            trades: cov.n,
            with_pending: cov.covered,
            share: share(cov.covered, cov.n),
        },
        ended: Ends::from_counts(0, &[0; 4]),
    })
}

/// The fills that ended in the window, from Postgres.
async fn ends(c: &tokio_postgres::Client, nw: NamedWindow) -> Result<Ends, StatsError> {
    let w = nw.window;
    let rows = c
        .query(
            include_str!("sql/pending_ends.sql"),
            &[&w.from_ms, &w.to_ms],
        )
        .await?;
    let count_of = |reason: &str| {
        rows.iter()
            .find(|r| r.get::<_, &str>(0) == reason)
            .map_or(0, |r| r.get::<_, i64>(1).max(0) as u64)
    };
    let voided: Vec<u64> = REASONS.iter().map(|r| count_of(r)).collect();
    Ok(Ends::from_counts(count_of("confirmed"), &voided))
}

impl Ends {
    /// From the confirmed count and the voided count per reason of [`REASONS`].
    fn from_counts(confirmed: u64, voided_by: &[u64]) -> Ends {
        let voided: u64 = voided_by.iter().sum();
        let count = confirmed + voided;
        Ends {
            count,
            confirmed,
            voided,
            void_share: share(voided, count),
            voided_by_reason: REASONS
                .iter()
                .zip(voided_by)
                .map(|(reason, n)| EndShare {
                    reason: (*reason).into(),
                    count: *n,
                    share: share(*n, count),
                })
                .collect(),
        }
    }
}
