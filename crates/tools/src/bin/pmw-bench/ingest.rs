//! Server-side figures read back from ClickHouse after a window: the ingest stages of pmw-live
//! (`ingest_latency`, one row per block, live blocks only: `backfilled = 0`) and push's own
//! detect→push stamps (`push_latency`), each as percentiles of per-row differences; and the split
//! of each client-observed delivery into ingest, push and the last hop.

use std::collections::BTreeMap;

use pmw_core::ch::ChClient;

use crate::clients::Sample;
use crate::stats::Summary;

/// Ingest stages over one window of detection times.
pub struct Stages {
    pub label: String,
    pub blocks: usize,
    pub with_trades: usize,
    /// detect → logs fetched, every block.
    pub logs: Option<Summary>,
    /// detect → stored (trades inserted), every block.
    pub stored: Option<Summary>,
    /// detect → stored, blocks that carried trades only.
    pub stored_trades: Option<Summary>,
}

/// Stages of the blocks detected in `[from_ms, to_ms)`.
pub async fn stages(
    ch: &ChClient,
    label: &str,
    from_ms: i64,
    to_ms: i64,
) -> anyhow::Result<Stages> {
    let rows: Vec<(i64, i64, i64, u32)> = ch
        .query(
            "SELECT t_detect_ms, t_logs_ms, t_stored_ms, trade_count FROM ingest_latency FINAL \
             WHERE backfilled = 0 AND t_detect_ms >= ? AND t_detect_ms < ?",
        )
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all()
        .await?;
    let logs: Vec<f64> = rows.iter().map(|r| (r.1 - r.0) as f64).collect();
    let stored: Vec<f64> = rows.iter().map(|r| (r.2 - r.0) as f64).collect();
    let traded: Vec<f64> = rows
        .iter()
        .filter(|r| r.3 > 0)
        .map(|r| (r.2 - r.0) as f64)
        .collect();
    Ok(Stages {
        label: label.to_string(),
        blocks: rows.len(),
        with_trades: traded.len(),
        logs: Summary::of(&logs),
        stored: Summary::of(&stored),
        stored_trades: Summary::of(&traded),
    })
}

/// push's own detect→push (`t_push_ms − t_detect_ms`) for live deliveries on `channel` of the
/// trades of blocks `(after, upto]`.
pub async fn server_push(
    ch: &ChClient,
    channel: &str,
    after: u64,
    upto: u64,
) -> anyhow::Result<Option<Summary>> {
    let rows: Vec<i64> = ch
        .query(
            "SELECT t_push_ms - t_detect_ms FROM push_latency \
             WHERE channel = ? AND backfilled = 0 AND block_number > ? AND block_number <= ?",
        )
        .bind(channel)
        .bind(after)
        .bind(upto)
        .fetch_all()
        .await?;
    let v: Vec<f64> = rows.iter().map(|&d| d as f64).collect();
    Ok(Summary::of(&v))
}

/// Where each delivery's time went, per delivery: detect→stored (pmw-live, from its block's
/// `ingest_latency` row), stored→`t_push_ms` (push: wake-up, read, claim, render, up to the
/// socket write or the HTTP attempt), `t_push_ms`→received (socket or HTTP, and the client).
#[derive(Default)]
pub struct Breakdown {
    pub stored: Option<Summary>,
    pub push: Option<Summary>,
    pub wire: Option<Summary>,
}

pub async fn breakdown(
    ch: &ChClient,
    samples: &[Sample],
    after: u64,
    upto: u64,
) -> anyhow::Result<Breakdown> {
    let rows: Vec<(u64, i64)> = ch
        .query(
            "SELECT block_number, t_stored_ms FROM ingest_latency FINAL \
             WHERE backfilled = 0 AND block_number > ? AND block_number <= ?",
        )
        .bind(after)
        .bind(upto)
        .fetch_all()
        .await?;
    let stored_at: BTreeMap<u64, i64> = rows.into_iter().collect();
    let (mut stored, mut push, mut wire) = (Vec::new(), Vec::new(), Vec::new());
    for s in samples {
        if let Some(&t) = stored_at.get(&s.block) {
            stored.push((t - s.detect_ms) as f64);
            push.push((s.push_ms - t) as f64);
        }
        wire.push(s.recv_us as f64 / 1_000.0 - s.push_ms as f64);
    }
    Ok(Breakdown {
        stored: Summary::of(&stored),
        push: Summary::of(&push),
        wire: Summary::of(&wire),
    })
}
