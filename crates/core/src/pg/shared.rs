//! Postgres reads more than one service makes: the ingest watermark and market names. A
//! statement that `pmwctl diag` looks for in `pg_stat_statements` carries a `pmw:<name>` marker
//! comment, never matched by its text.

use std::collections::HashMap;

use tokio_postgres::GenericClient;

use crate::message::Market;
use crate::types::cursor::MAX_LOG_INDEX;
use crate::Cursor;

/// The marker of the watermark read in `pg_stat_statements` (see [`watermark`]).
pub const WATERMARK_MARKER: &str = "pmw:watermark";

/// The ingest watermark: the highest block whose trades are all in ClickHouse, or `None` before
/// the first block. Readers never look past it.
pub async fn watermark(c: &impl GenericClient) -> Result<Option<u64>, tokio_postgres::Error> {
    Ok(c.query_opt(include_str!("sql/watermark.sql"), &[])
        .await?
        .map(|r| r.get::<_, i64>(0) as u64))
}

/// The watermark as the last cursor a reader may see.
pub fn watermark_cursor(block: u64) -> Cursor {
    Cursor {
        block,
        log_index: MAX_LOG_INDEX,
    }
}

/// Resolved market names of the tokens of `rows` (a page of trades).
pub async fn market_names_of(
    c: &impl GenericClient,
    rows: &[crate::ch::TradeRow],
) -> Result<HashMap<String, Market>, tokio_postgres::Error> {
    let mut tokens: Vec<&str> = rows.iter().map(|r| r.token_id.as_str()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    market_names(c, &tokens).await
}

/// Resolved market names of `tokens` (the background resolver's cache); unresolved ones are
/// absent.
pub async fn market_names(
    c: &impl GenericClient,
    tokens: &[&str],
) -> Result<HashMap<String, Market>, tokio_postgres::Error> {
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = c
        .query(include_str!("sql/market_names.sql"), &[&tokens])
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                Market {
                    question: r.get(1),
                    outcome: r.get(2),
                    slug: r.get(3),
                    condition_id: r.get(4),
                    event_slug: r.get(5),
                },
            )
        })
        .collect())
}
