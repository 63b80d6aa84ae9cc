//! Where a resuming WebSocket session starts. A `since` with a block hash
//! (`<cursor>:<8 hex>`) is checked against the canonical chain as pmw-live recorded it
//! (`chain_blocks`): when a reorg replaced that block, the client is owed `retract`s for what it
//! may hold from the orphaned blocks, then the canonical branch from the common ancestor. A plain
//! cursor is taken as canonical (the old contract). A position further ahead of the ingest
//! watermark than any reorg window is no position pmw gave out: it is refused with the reason
//! (the session would otherwise wait, silent, for a block that may never come).

use pmw_core::ch::TradeRow;
use pmw_core::pg::ledger as one;
use pmw_core::pg::PgPool;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{ch::ChClient, Cursor, Position};

/// How far ahead of the ingest watermark a resume position may be (a client may hold trades of
/// blocks a reorg unwound, until they are ingested again): beyond it the position is refused.
pub const AHEAD_TOLERANCE_BLOCKS: u64 = 256;

/// Why a session cannot start where it asked.
#[derive(Debug)]
pub enum ResumeError {
    /// `since` is beyond the ledger: a position pmw never gave out.
    Ahead { since: Position, watermark: u64 },
    /// A store did not answer.
    Store(String),
}

impl std::fmt::Display for ResumeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResumeError::Ahead { since, watermark } => write!(
                f,
                "since {since} is ahead of the ledger (block {watermark}): resume from a cursor you received"
            ),
            ResumeError::Store(e) => f.write_str(e),
        }
    }
}

/// `since` is further ahead of `watermark` than the reorg tolerance.
fn ahead(since: Position, watermark: Option<u64>) -> Option<ResumeError> {
    let watermark = watermark?;
    (since.cursor.block > watermark.saturating_add(AHEAD_TOLERANCE_BLOCKS))
        .then_some(ResumeError::Ahead { since, watermark })
}

/// Where a session starts and what it must drop first.
#[derive(Debug)]
pub struct Start {
    /// Replay after this position.
    pub from: Position,
    /// Orphaned trades of the session's wallets and markets the client may hold (retract them first).
    pub retract: Vec<TradeRow>,
}

/// Decide where a session resuming at `since` starts (`wallets` and the followed markets'
/// `tokens`: what it follows).
pub async fn start(
    pool: &PgPool,
    ch: &ChClient,
    since: Position,
    wallets: &[String],
    tokens: &[String],
) -> Result<Start, ResumeError> {
    let c = pool
        .get()
        .await
        .map_err(|e| ResumeError::Store(e.to_string()))?;
    let watermark = pmw_core::pg::watermark(&**c)
        .await
        .map_err(|e| ResumeError::Store(pmw_core::pg::describe(&e)))?;
    if let Some(e) = ahead(since, watermark) {
        return Err(e);
    }
    drop(c);
    judge(pool, ch, since, wallets, tokens)
        .await
        .map_err(ResumeError::Store)
}

/// Where a session resuming at a position the ledger has reached starts.
async fn judge(
    pool: &PgPool,
    ch: &ChClient,
    since: Position,
    wallets: &[String],
    tokens: &[String],
) -> Result<Start, String> {
    let keep = Start {
        from: since,
        retract: Vec::new(),
    };
    let Some(hash) = since.hash.map(hex::encode) else {
        return Ok(keep);
    };
    let c = pool.get().await.map_err(|e| e.to_string())?;
    let ingested = if since.cursor.log_index == MAX_LOG_INDEX {
        None
    } else {
        one::ingested(&**c, ch, since.cursor, &hash)
            .await
            .map_err(|e| e.to_string())?
    };
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
    let retract = one::retractions_between(&**c, ch, ancestor, since.cursor.block)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| {
            r.cursor() <= since.cursor
                && (wallets.contains(&r.maker) || tokens.contains(&r.token_id))
                && ingested.is_none_or(|t| r.version as i64 >= t)
        })
        .collect();
    tracing::info!(since = %since, from = %from, "resume from an orphaned block");
    Ok(Start { from, retract })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(block: u64) -> Position {
        Position::maybe(
            Cursor {
                block,
                log_index: 0,
            },
            None,
        )
    }

    #[test]
    fn a_position_beyond_the_reorg_window_ahead_of_the_ledger_is_refused() {
        assert!(ahead(at(999_999_999_999), Some(1_000)).is_some());
        assert!(ahead(at(1_000 + AHEAD_TOLERANCE_BLOCKS + 1), Some(1_000)).is_some());
        let msg = ahead(at(5_000), Some(1_000)).unwrap().to_string();
        assert!(msg.contains("ahead of the ledger (block 1000)"), "{msg}");
    }

    #[test]
    fn positions_the_ledger_reached_or_a_reorg_may_have_unwound_are_judged() {
        assert!(ahead(at(900), Some(1_000)).is_none());
        assert!(ahead(at(1_000 + AHEAD_TOLERANCE_BLOCKS), Some(1_000)).is_none());
        // Before the first block nothing can be judged: the session waits, as before.
        assert!(ahead(at(999_999_999_999), None).is_none());
    }
}
