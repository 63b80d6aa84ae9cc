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
use pmw_core::{Position, UnixMs};

use crate::ledger::{LaneCursor, Ledger, Source};
use crate::recorder::Recorder;

/// A leader's claim on its slot: every cursor move and claim checks it in the same statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub slot: i16,
    pub epoch: i64,
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
    /// A lane's reader and cursor from `(position, reorg_id)`.
    fn start(&self, source: Source, (position, reorg_id): (Position, i64)) -> (Ledger, LaneCursor) {
        (
            Ledger::new(
                self.pool.clone(),
                self.ch.clone(),
                source,
                self.limit,
                self.span,
            ),
            LaneCursor::new(position, reorg_id),
        )
    }
}

/// Milliseconds now, for the rows a round writes.
fn now_ms() -> i64 {
    UnixMs::now().0
}
