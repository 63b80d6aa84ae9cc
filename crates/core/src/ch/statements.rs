//! Every ClickHouse statement the services send, in one place: the `.sql` files of `ch/sql`
//! (and the migrations). Callers fill `?` with binds and `{name}` holes with validated text;
//! [`ALL`] lists them so the two-engine test (18.16 and a current ClickHouse) can check that each
//! one ran on both.

/// `schema_migrations` (created on first migrate).
pub const SCHEMA_MIGRATIONS_TABLE: &str = include_str!("sql/schema_migrations_table.sql");
/// Applied migrations.
pub const MIGRATIONS_APPLIED: &str = include_str!("sql/migrations_applied.sql");
/// Whether `schema_migrations` exists (the start-up schema check).
pub const HAS_MIGRATIONS_TABLE: &str = include_str!("sql/has_migrations_table.sql");
/// Trades after a cursor up to the watermark (push rounds). Hole: `{COLUMNS}`.
pub const TRADES_AFTER: &str = include_str!("sql/trades_after.sql");
/// Every version of the trades after a cursor (push's small round reads). Hole: `{COLUMNS}`.
pub const VERSIONS_AFTER: &str = include_str!("sql/versions_after.sql");
/// Visible trades of one block (reorg retraction). Hole: `{COLUMNS}`.
pub const TRADES_OF_BLOCK: &str = include_str!("sql/trades_of_block.sql");
/// Visible trades above the watermark (live start-up). Hole: `{COLUMNS}`.
pub const VISIBLE_ABOVE: &str = include_str!("sql/visible_above.sql");
/// Retracted trades in a block range (push, resume). Hole: `{COLUMNS}`.
pub const RETRACTED_BETWEEN: &str = include_str!("sql/retracted_between.sql");
/// The latest version of every trade in a block range (the completeness audit). Hole: `{COLUMNS}`.
pub const LATEST_BETWEEN: &str = include_str!("sql/latest_between.sql");
/// Per-wallet trades in a cursor range (API, resumes). Holes: `{COLUMNS}`, `{list}`.
pub const WALLET_TRADES_BETWEEN: &str = include_str!("sql/wallet_trades_between.sql");
/// Trades of followed markets' tokens in a cursor range (resumes). Holes: `{COLUMNS}`, `{list}`.
pub const TOKEN_TRADES_BETWEEN: &str = include_str!("sql/token_trades_between.sql");
/// When a trade was ingested (resume check).
pub const INGESTED_VERSION: &str = include_str!("sql/ingested_version.sql");
/// Trades push has still to deliver (`pmwctl status`).
pub const TRADES_WAITING: &str = include_str!("sql/trades_waiting.sql");
/// Ingest latency rows in a window.
pub const INGEST_IN_WINDOW: &str = include_str!("sql/ingest_in_window.sql");
/// Stats: ingest figures of a window.
pub const INGEST_WINDOW: &str = include_str!("sql/ingest_window.sql");
/// Stats: push figures of a window.
pub const PUSH_WINDOW: &str = include_str!("sql/push_window.sql");
/// Stats: ingest series.
pub const INGEST_SERIES: &str = include_str!("sql/ingest_series.sql");
/// Stats: push series.
pub const PUSH_SERIES: &str = include_str!("sql/push_series.sql");
/// Stats: the detect-to-push histogram. Hole: `{bins}`.
pub const HISTOGRAM: &str = include_str!("sql/histogram.sql");
/// Stats: ingest rows dated after now.
pub const INGEST_ROWS_AFTER: &str = include_str!("sql/ingest_rows_after.sql");
/// Stats: push rows dated after now.
pub const PUSH_ROWS_AFTER: &str = include_str!("sql/push_rows_after.sql");
/// Retention: active partitions. Hole: `{tables}`.
pub const ACTIVE_PARTITIONS: &str = include_str!("sql/active_partitions.sql");
/// Retention: drop one partition. Holes: `{table}`, `{id}`.
pub const DROP_PARTITION: &str = include_str!("sql/drop_partition.sql");
/// API: one page of an endpoint's delivery log.
pub const DELIVERY_LOG_PAGE: &str = include_str!("sql/delivery_log_page.sql");
/// API: an endpoint's attempts and deliveries since a time.
pub const DELIVERY_LOG_HEALTH: &str = include_str!("sql/delivery_log_health.sql");
/// API: an endpoint's newest attempt that did not deliver.
pub const DELIVERY_LOG_LAST_ERROR: &str = include_str!("sql/delivery_log_last_error.sql");
/// Stats: availability of a window from the per-second samples.
pub const AVAILABILITY_WINDOW: &str = include_str!("sql/availability_window.sql");
/// Stats: availability per UTC day (the daily bars).
pub const AVAILABILITY_DAYS: &str = include_str!("sql/availability_days.sql");
/// Stats: runs of failing samples at least a threshold long (incidents).
pub const AVAILABILITY_RUNS: &str = include_str!("sql/availability_runs.sql");
/// Stats: what the samples of an incident recorded about its cause.
pub const AVAILABILITY_CAUSES: &str = include_str!("sql/availability_causes.sql");
/// Stats: the newest sample's time (an open incident).
pub const AVAILABILITY_NEWEST: &str = include_str!("sql/availability_newest.sql");
/// Stats: seen-pending → pushed of a window, by channel (the pending tier).
pub const PENDING_PUSH: &str = include_str!("sql/pending_push.sql");
/// Stats: the pending tier's lead over the block header of a window.
pub const PENDING_LEAD: &str = include_str!("sql/pending_lead.sql");
/// Stats: delivered trades of a window and those that had a pending first.
pub const PENDING_COVERAGE: &str = include_str!("sql/pending_coverage.sql");
/// API readiness: recent live WebSocket latency.
pub const RECENT_LATENCY: &str = include_str!("sql/recent_latency.sql");

/// Every statement template with its name. Inserts (`INSERT INTO t(cols) FORMAT RowBinary`, by
/// the `clickhouse` crate) and the migration files are not listed: they are covered by table.
pub const ALL: &[(&str, &str)] = &[
    ("schema_migrations_table", SCHEMA_MIGRATIONS_TABLE),
    ("migrations_applied", MIGRATIONS_APPLIED),
    ("has_migrations_table", HAS_MIGRATIONS_TABLE),
    ("trades_after", TRADES_AFTER),
    ("trades_of_block", TRADES_OF_BLOCK),
    ("visible_above", VISIBLE_ABOVE),
    ("retracted_between", RETRACTED_BETWEEN),
    ("latest_between", LATEST_BETWEEN),
    ("wallet_trades_between", WALLET_TRADES_BETWEEN),
    ("token_trades_between", TOKEN_TRADES_BETWEEN),
    ("ingested_version", INGESTED_VERSION),
    ("trades_waiting", TRADES_WAITING),
    ("ingest_in_window", INGEST_IN_WINDOW),
    ("ingest_window", INGEST_WINDOW),
    ("push_window", PUSH_WINDOW),
    ("ingest_series", INGEST_SERIES),
    ("push_series", PUSH_SERIES),
    ("histogram", HISTOGRAM),
    ("ingest_rows_after", INGEST_ROWS_AFTER),
    ("push_rows_after", PUSH_ROWS_AFTER),
    ("active_partitions", ACTIVE_PARTITIONS),
    ("drop_partition", DROP_PARTITION),
    ("delivery_log_page", DELIVERY_LOG_PAGE),
    ("delivery_log_health", DELIVERY_LOG_HEALTH),
    ("delivery_log_last_error", DELIVERY_LOG_LAST_ERROR),
    ("recent_latency", RECENT_LATENCY),
    ("availability_window", AVAILABILITY_WINDOW),
    ("availability_days", AVAILABILITY_DAYS),
    ("availability_runs", AVAILABILITY_RUNS),
    ("availability_causes", AVAILABILITY_CAUSES),
    ("availability_newest", AVAILABILITY_NEWEST),
    ("pending_push", PENDING_PUSH),
    ("pending_lead", PENDING_LEAD),
    ("pending_coverage", PENDING_COVERAGE),
];

/// The fixed fragments of a template, in order: comment lines dropped, whitespace collapsed,
/// split at binds (`?`) and holes (`{name}`). A statement sent from the template contains them
/// all, in this order.
pub fn fragments(template: &str) -> Vec<String> {
    let text = normalize(template);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_hole = false;
    for c in text.chars() {
        match (in_hole, c) {
            (false, '?') | (false, '{') => {
                in_hole = c == '{';
                out.push(std::mem::take(&mut cur));
            }
            (true, '}') => in_hole = false,
            (true, _) => {}
            (false, _) => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Comment lines dropped, whitespace collapsed to single spaces.
pub fn normalize(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `sent` (a statement as the server received it) was made from `template`.
pub fn made_from(template: &str, sent: &str) -> bool {
    let sent = normalize(sent);
    let mut rest = sent.as_str();
    for f in fragments(template) {
        match rest.find(&f) {
            Some(i) => rest = &rest[i + f.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_matches_its_template_only() {
        let t = "-- c\nSELECT {COLUMNS} FROM trades\nWHERE a = ? AND b IN ({list})";
        assert_eq!(
            fragments(t),
            ["SELECT", "FROM trades WHERE a =", "AND b IN (", ")"]
        );
        assert!(made_from(
            t,
            "SELECT x, y FROM trades WHERE a = 5 AND b IN ('q')"
        ));
        assert!(!made_from(
            t,
            "SELECT x FROM push_latency WHERE a = 5 AND b IN (1)"
        ));
        for (name, sql) in ALL {
            assert!(!fragments(sql).is_empty(), "{name}");
        }
    }
}
