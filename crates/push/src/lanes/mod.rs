//! The three lanes a leader runs over the same ledger, each from its own cursor, fenced by the
//! same epoch: the WebSocket lane ([`WsLane`]: `push_cursor`, a `ws_claims` row, fan-out to the
//! hub's sessions), the webhook lane ([`HookLane`]: `webhook_cursor`, the round's
//! `webhook_deliveries` queued in the same transaction) and the finality lane ([`FinalLane`]:
//! `final_cursor`, `final` events behind the finalized watermark and behind both other lanes).
//! Each reads with its own [`crate::ledger::Ledger`] and has its own deliver step and statement.
//! WebSocket frames never wait for webhook work, and the WebSocket round's transaction is O(1)
//! in endpoints and accounts.

mod finals;
mod hooks;
mod queue;
mod ws;

pub use finals::FinalLane;
pub use hooks::HookLane;
pub use ws::WsLane;

use pmw_core::ch::ChClient;
use pmw_core::pg::PgPool;
use pmw_core::{Cursor, Position, UnixMs};

use crate::ledger::{Batch, LaneCursor, Ledger, Reading, Source};
use crate::matcher::Matcher;
use crate::round::{RoundError, RoundOutcome};
use pmw_session::recorder::Recorder;
use pmw_session::subs::Index;

pub use crate::fence::Fence;

/// Where a lane starts: its cursor's position (with its block's hash where known) and the reorg
/// id it was read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStart {
    pub position: Position,
    pub reorg_id: i64,
}

/// What every lane is built from.
#[derive(Clone)]
pub struct LaneSetup {
    pub pool: PgPool,
    pub ch: ChClient,
    pub fence: Fence,
    /// Trades read per round.
    pub limit: u64,
    /// Blocks a catch-up round reads at most.
    pub span: u64,
    /// Where cancelled webhook deliveries and latency rows are recorded.
    pub facts: Recorder,
}

impl LaneSetup {
    /// A lane's reader and cursor from where it starts.
    fn start(&self, source: Source, from: LaneStart) -> (Ledger, LaneCursor) {
        (
            Ledger::new(
                self.pool.clone(),
                self.ch.clone(),
                source,
                self.limit,
                self.span,
            ),
            LaneCursor::new(from.position, from.reorg_id),
        )
    }
}

/// Milliseconds now, for the rows a round writes.
fn now_ms() -> i64 {
    UnixMs::now().0
}

/// What makes a lane: its reader, and its deliver step.
pub(crate) trait Lane {
    /// The lane's ledger reader, cursor and subscription index.
    fn reader(&mut self) -> (&mut Ledger, &LaneCursor, &mut Matcher);

    /// The round read the state and has its index (before the trades are read).
    fn seen(&mut self, _read: &Reading) {}

    /// Deliver `batch` and move the lane's cursor (fenced), on the read's connection.
    async fn deliver(
        &mut self,
        client: deadpool_postgres::Object,
        index: &Index,
        batch: Batch,
    ) -> Result<RoundOutcome, RoundError>;
}

/// One round of `lane`, never past `bound`. Any error leaves the cursor where it was and makes
/// the next round reload the subscription index (a stale index must never fail rounds forever).
async fn round<L: Lane>(lane: &mut L, bound: Option<Cursor>) -> Result<RoundOutcome, RoundError> {
    let outcome = async {
        let mut read = {
            let (ledger, at, matcher) = lane.reader();
            ledger.begin(at, matcher, bound).await?
        };
        lane.seen(&read);
        {
            let (ledger, at, _) = lane.reader();
            ledger.read_batch(&mut read, at, bound).await?;
        }
        match read.batch.take() {
            None => Ok(RoundOutcome::default()),
            Some(batch) => lane.deliver(read.client, &read.index, batch).await,
        }
    }
    .await;
    if outcome.is_err() {
        lane.reader().2.failed();
    }
    outcome
}

/// The span of `batch` as a bus round carries it.
fn span(batch: &Batch) -> pmw_session::bus::round::Span {
    pmw_session::bus::round::Span {
        from: batch.from,
        through: batch.through,
        rewound: batch.rewound,
        reorg_id: batch.reorg_id,
    }
}
