//! Bounded catch-up reads. A round far behind the watermark reads at most
//! `PMW_PUSH_CATCHUP_SPAN_BLOCKS` blocks (so a long catch-up never asks ClickHouse for millions
//! of rows at once), but only over blocks whose trade counts pmw-live recorded in
//! `chain_blocks`. What it read is then checked block by block against those counts: the cursor
//! moves past empty blocks to the span's end when every block matched, and never past a block
//! that returned fewer rows than recorded (a short answer from ClickHouse delays delivery; it
//! never skips a trade).

use std::collections::HashMap;

use pmw_core::ch::TradeRow;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{Cursor, Position};

/// A span's recorded blocks `(after, upto]`, each with its hash and trade count.
#[derive(Debug, Clone)]
pub struct Span {
    pub upto: u64,
    blocks: Vec<(u64, String, u64)>,
}

/// The span to read after block `after` when the watermark `wm` is more than `span` blocks
/// ahead and every block of it has a recorded trade count; `None`: read up to `wm` as usual.
pub async fn span(
    c: &deadpool_postgres::Object,
    after: u64,
    wm: u64,
    span: u64,
) -> Result<Option<Span>, tokio_postgres::Error> {
    if wm <= after.saturating_add(span) {
        return Ok(None);
    }
    let upto = after + span;
    let rows = c
        .query(
            include_str!("sql/span_counts.sql"),
            &[&(after as i64), &(upto as i64)],
        )
        .await?;
    let blocks: Option<Vec<(u64, String, u64)>> = rows
        .iter()
        .map(|r| {
            r.get::<_, Option<i32>>(2)
                .map(|n| (r.get::<_, i64>(0) as u64, r.get::<_, String>(1), n as u64))
        })
        .collect();
    Ok(blocks
        .filter(|b| b.len() as u64 == span)
        .map(|blocks| Span { upto, blocks }))
}

/// What a bounded read proved: the rows to deliver and how far the cursor may move.
#[derive(Debug, PartialEq)]
pub struct Checked {
    /// Rows to deliver (those before the first block that came back short, if any).
    pub keep: usize,
    /// Where the cursor may move: the span's end when every block matched and the read was not
    /// cut by the limit, else the last kept row (or `None`: no progress).
    pub through: Option<Position>,
    /// The first block whose rows did not match its recorded count, with (read, recorded).
    pub short: Option<(u64, u64, u64)>,
}

/// Check `rows` (read after `from`, ledger order, `full` when the limit cut them) against the
/// span's recorded counts. Blocks after `from.block` are checked up to the last one the read
/// covered completely (all of them unless `full`).
pub fn check(span: &Span, from: Cursor, rows: &[TradeRow], full: bool) -> Checked {
    let mut read: HashMap<u64, u64> = HashMap::new();
    for r in rows.iter().filter(|r| r.block_number > from.block) {
        *read.entry(r.block_number).or_default() += 1;
    }
    // With the limit hit, the last row's block may be partial: check only before it.
    let checked_below = match (full, rows.last()) {
        (true, Some(last)) => last.block_number,
        _ => u64::MAX,
    };
    let mut end_of_matched: Option<Position> = None;
    for (number, hash, recorded) in &span.blocks {
        if *number >= checked_below {
            break;
        }
        let got = read.get(number).copied().unwrap_or(0);
        if got != *recorded {
            let keep = rows.iter().take_while(|r| r.block_number < *number).count();
            let through = rows[..keep]
                .last()
                .map(|r| Position::of(r.cursor(), &r.block_hash))
                .or(end_of_matched);
            return Checked {
                keep,
                through,
                short: Some((*number, got, *recorded)),
            };
        }
        end_of_matched = Some(Position::of(
            Cursor {
                block: *number,
                log_index: MAX_LOG_INDEX,
            },
            hash,
        ));
    }
    let last_row = rows.last().map(|r| Position::of(r.cursor(), &r.block_hash));
    let through = if full {
        last_row
    } else {
        end_of_matched.or(last_row)
    };
    Checked {
        keep: rows.len(),
        through,
        short: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block: u64, log_index: u32) -> TradeRow {
        pmw_testkit::rows::trade(block, log_index, &format!("0x{block:064x}"))
    }

    fn span(counts: &[(u64, u64)]) -> Span {
        Span {
            upto: counts.last().unwrap().0,
            blocks: counts
                .iter()
                .map(|&(n, c)| (n, format!("0x{n:064x}"), c))
                .collect(),
        }
    }

    const FROM: Cursor = Cursor {
        block: 10,
        log_index: MAX_LOG_INDEX,
    };

    #[test]
    fn a_complete_read_moves_to_the_span_end_past_empty_blocks() {
        let s = span(&[(11, 0), (12, 2), (13, 0), (14, 0)]);
        let c = check(&s, FROM, &[row(12, 0), row(12, 1)], false);
        assert_eq!(c.keep, 2);
        assert_eq!(c.short, None);
        assert_eq!(
            c.through.unwrap().to_string(),
            format!("000000000014-999999:{}", "0".repeat(8))
        );
    }

    #[test]
    fn a_short_block_stops_the_cursor_and_the_rows_before_it() {
        // Block 12 recorded 2 trades, ClickHouse returned 1: nothing from block 12 on is taken.
        let s = span(&[(11, 1), (12, 2), (13, 1)]);
        let c = check(&s, FROM, &[row(11, 0), row(12, 0), row(13, 0)], false);
        assert_eq!(c.keep, 1);
        assert_eq!(c.short, Some((12, 1, 2)));
        assert_eq!(
            c.through.unwrap().cursor,
            Cursor {
                block: 11,
                log_index: 0
            }
        );
        // Nothing at all before the short block: no progress.
        let c = check(&span(&[(11, 1)]), FROM, &[], false);
        assert_eq!((c.keep, c.through, c.short), (0, None, Some((11, 0, 1))));
    }

    #[test]
    fn a_read_cut_by_the_limit_checks_the_blocks_before_its_last_and_stops_at_its_last_row() {
        let s = span(&[(11, 1), (12, 3), (13, 0)]);
        let c = check(&s, FROM, &[row(11, 0), row(12, 0)], true);
        assert_eq!(c.keep, 2);
        assert_eq!(c.short, None);
        assert_eq!(
            c.through.unwrap().cursor,
            Cursor {
                block: 12,
                log_index: 0
            }
        );
    }
}
