//! Latency rows: one `ingest_latency` row per block (live) and one `push_latency` row per delivery
//! (push). Written as Int64 milliseconds through RowBinary: no timezone can touch them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::window::Window;
use crate::ch::ChClient;

/// Ingest timings of one block. `head_lead_ms` is a clock diagnostic, never a latency origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct IngestLatencyRow {
    pub block_number: u64,
    pub block_hash: String,
    pub t_detect_ms: i64,
    pub t_logs_ms: i64,
    pub t_stored_ms: i64,
    pub head_lead_ms: i64,
    pub trade_count: u32,
    pub backfilled: u8,
}

/// One delivered message (channel `ws`, `webhook`, `ws_final` or `webhook_final`; a `pending`
/// pushed: `ws_pending` or `webhook_pending`, detected at the fill's first sighting in a pool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct PushLatencyRow {
    pub block_number: u64,
    pub log_index: u32,
    /// Borrowed when written (push's channels are constants: no allocation per frame).
    pub channel: Cow<'static, str>,
    pub target_id: u64,
    pub t_detect_ms: i64,
    pub t_push_ms: i64,
    pub epoch: u64,
    pub backfilled: u8,
    /// The webhook attempt that delivered it (1: the first); 0 for WebSocket frames. The
    /// dashboard's first-attempt webhook figure counts `attempt = 1` only.
    pub attempt: u32,
    /// The pending fill (`pending_fills.id`) a pending row announced, or the one a trade row
    /// confirmed (`ledger.pending_id`); 0: none. The dashboard's pending figures pair by it.
    pub pending_id: u64,
}

/// Insert ingest latency rows (the production write path used by `pmw-live`).
pub async fn insert_ingest(
    ch: &ChClient,
    rows: &[IngestLatencyRow],
) -> Result<(), clickhouse::error::Error> {
    insert_all(ch, "ingest_latency", rows).await
}

/// Insert push latency rows (the production write path used by `pmw-push`).
pub async fn insert_push(
    ch: &ChClient,
    rows: &[PushLatencyRow],
) -> Result<(), clickhouse::error::Error> {
    insert_all(ch, "push_latency", rows).await
}

/// Insert a batch in one INSERT; an empty batch is a no-op.
pub async fn insert_all<T>(
    ch: &ChClient,
    table: &str,
    rows: &[T],
) -> Result<(), clickhouse::error::Error>
where
    T: clickhouse::RowOwned + clickhouse::RowWrite,
{
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = ch.insert::<T>(table).await?;
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await
}

/// Ingest rows detected inside `w` (both bounds applied), de-duplicated, in block order.
pub async fn ingest_in_window(
    ch: &ChClient,
    w: Window,
) -> Result<Vec<IngestLatencyRow>, clickhouse::error::Error> {
    ch.query(super::statements::INGEST_IN_WINDOW)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all()
        .await
}

/// Live deliveries on `channel` (`ws` or `webhook`) pushed inside `w`: their count and median
/// detect-to-push (ms; 0 when there are none). The API's readiness check.
pub async fn recent(
    ch: &ChClient,
    channel: &str,
    w: Window,
) -> Result<(u64, i64), clickhouse::error::Error> {
    ch.query(super::statements::RECENT_LATENCY)
        .bind(channel)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_one::<(u64, i64)>()
        .await
}
