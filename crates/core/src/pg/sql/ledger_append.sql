-- Rows appended to the hot ledger as they are (an audit's corrections: backfilled fills and
-- retractions, each with its own version), in the caller's transaction, seqs from ledger_head
-- under its row lock. $1 the rows (a JSON array of trade rows), $2 their count, $3 now (ms).
-- The insert itself is ledger_insert.sql, filled in by the code.
WITH alloc AS (
    UPDATE ledger_head SET seq = seq + $2::bigint WHERE id = 1 AND $2::bigint > 0
    RETURNING seq - $2::bigint AS base
)
{ledger_insert}
