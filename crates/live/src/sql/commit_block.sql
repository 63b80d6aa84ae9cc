-- A block's commit, in one statement (one round trip): record it in chain_blocks, append its
-- trades to the hot ledger and move the ingest watermark to it, all only while this writer still
-- holds the live lock (the fence predicate, filled in by the code, evaluated once), and, when
-- $10 names a channel, wake push with the block number: the NOTIFY is delivered when this
-- statement commits, never before. The trades' seqs come from ledger_head under its row lock
-- (commit order; skipped for a block without trades).
-- $1 block, $2 hash, $3 now (ms), $4 writer epoch, $5 parent hash, $6 block time (ms),
-- $7 t_detect (ms), $8 backfilled, $9 trade count, $10 channel ('' for none),
-- $11 the trades (a JSON array of trade rows, in log order), appended by the hot ledger's
-- insert (core's ledger_insert.sql, filled in by the code).
-- Pending fills (migration 0023): once ledger_head's row lock is this statement's, `paired`
-- pairs the trades with open pending fills (pmw_pending_confirm, fresh snapshot) and confirms
-- them; each trade's ledger row carries its fill's id in pending_id, in this same commit. With
-- no open pending fill that is one index probe.
-- Returns one row when the watermark moved, none when fenced off: with the trades paired and
-- those whose calldata amounts differ from the logs.
WITH fence AS MATERIALIZED (
    SELECT 1 AS held WHERE {fence}
), recorded AS (
    INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count)
    SELECT $1, $2, $5, $6, $7, $8, $9 FROM fence
    ON CONFLICT (block_number) DO UPDATE
    SET block_hash = EXCLUDED.block_hash, parent_hash = EXCLUDED.parent_hash,
        block_time_ms = EXCLUDED.block_time_ms, t_detect_ms = EXCLUDED.t_detect_ms,
        backfilled = EXCLUDED.backfilled, trade_count = EXCLUDED.trade_count
    RETURNING block_number
), alloc AS (
    UPDATE ledger_head SET seq = seq + $9
    WHERE id = 1 AND $9 > 0 AND EXISTS (SELECT 1 FROM fence)
    RETURNING seq - $9 AS base
), paired AS MATERIALIZED (
    SELECT c.n, c.pending_id, c.mismatch
    FROM alloc, pmw_pending_confirm($11::jsonb, alloc.base, $1, $3) c
), ledgered AS (
    {ledger_insert}
    RETURNING 1
), moved AS (
    INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms)
    SELECT 1, $1, $2, $3 FROM fence
    ON CONFLICT (id) DO UPDATE
    SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
        updated_ms = EXCLUDED.updated_ms
    RETURNING block_number
)
SELECT moved.block_number,
       (SELECT count(*) FROM recorded) AS recorded,
       (SELECT count(*) FROM ledgered) AS ledgered,
       CASE WHEN $10::text <> '' THEN pg_notify($10::text, moved.block_number::text) END AS woke,
       (SELECT count(*) FROM paired) AS paired,
       (SELECT count(*) FROM paired WHERE mismatch) AS mismatched
FROM moved
