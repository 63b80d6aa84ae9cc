//! Where a resuming WebSocket session starts. A `since` with a block hash
//! (`<cursor>:<8 hex>`) is checked against the canonical chain as pmw-live recorded it
//! (`chain_blocks`): when a reorg replaced that block, the client is owed `retract`s for what it
//! may hold from the orphaned blocks, then the canonical branch from the common ancestor. A plain
//! cursor is taken as canonical (the old contract).

use pmw_core::ch::{trades, TradeRow};
use pmw_core::pg::PgPool;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{ch::ChClient, Cursor, Position};

/// Where a session starts and what it must drop first.
#[derive(Debug)]
pub struct Start {
    /// Replay after this position.
    pub from: Position,
    /// Orphaned trades of the session's wallets the client may hold (retract them first).
    pub retract: Vec<TradeRow>,
}

/// Decide where a session resuming at `since` starts (`wallets`: what it follows).
pub async fn start(
    pool: &PgPool,
    ch: &ChClient,
    since: Position,
    wallets: &[String],
) -> Result<Start, String> {
    let keep = Start {
        from: since,
        retract: Vec::new(),
    };
    let Some(hash) = since.hash.map(hex::encode) else {
        return Ok(keep);
    };
    let ingested = if since.cursor.log_index == MAX_LOG_INDEX {
        None
    } else {
        trades::ingested_ms(ch, since.cursor, &hash)
            .await
            .map_err(|e| format!("clickhouse: {e}"))?
    };
    let c = pool.get().await.map_err(|e| e.to_string())?;
    let row = c
        .query_one(
            include_str!("sql/resume_check.sql"),
            &[&(since.cursor.block as i64), &ingested.unwrap_or(0)],
        )
        .await
        .map_err(|e| pmw_core::pg::describe(&e))?;
    let canonical: Option<String> = row.get(0);
    let oldest: Option<i64> = row.get(1);
    let watermark: Option<i64> = row.get(2);
    let orphaned = match (canonical, oldest, watermark) {
        (Some(h), _, _) => !since.matches(&h),
        (None, Some(oldest), _) if (since.cursor.block as i64) < oldest => false,
        (None, _, None) => false,
        (None, _, Some(_)) => true,
    };
    if !orphaned {
        return Ok(keep);
    }
    let fallback = (since.cursor.block as i64 - 1)
        .min(watermark.unwrap_or(0))
        .max(0);
    let ancestor = row.get::<_, Option<i64>>(3).unwrap_or(fallback) as u64;
    let at = Cursor {
        block: ancestor,
        log_index: MAX_LOG_INDEX,
    };
    let from = Position::maybe(at, row.get::<_, Option<String>>(4).as_deref());
    let retract = trades::retracted_between(ch, ancestor, since.cursor.block)
        .await
        .map_err(|e| format!("clickhouse: {e}"))?
        .into_iter()
        .filter(|r| {
            r.cursor() <= since.cursor
                && wallets.contains(&r.maker)
                && ingested.is_none_or(|t| r.version as i64 >= t)
        })
        .collect();
    tracing::info!(since = %since, from = %from, "resume from an orphaned block");
    Ok(Start { from, retract })
}
