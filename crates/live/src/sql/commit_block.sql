-- A block's commit, in one statement (one round trip): record it in chain_blocks, append its
-- trades to the hot ledger and move the ingest watermark to it, all only while this writer still
-- holds the live lock (the fence predicate, filled in by the code, evaluated once), and, when
-- $10 names a channel, wake push with the block number: the NOTIFY is delivered when this
-- statement commits, never before. The trades' seqs come from ledger_head under its row lock
-- (commit order; skipped for a block without trades).
-- $1 block, $2 hash, $3 now (ms), $4 lock pid, $5 parent hash, $6 block time (ms),
-- $7 t_detect (ms), $8 backfilled, $9 trade count, $10 channel ('' for none),
-- $11 the trades (a JSON array of trade rows, in log order).
-- Returns one row when the watermark moved, none when fenced off.
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
), ledgered AS (
    INSERT INTO ledger (block_number, log_index, block_hash, version, seq, tx_hash, block_time_ms,
                        exchange, exchange_version, order_hash, maker, taker, side, token_id,
                        shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled,
                        retracted, audit, committed_ms)
    SELECT t.block_number, t.log_index, t.block_hash, t.version, alloc.base + t.n, t.tx_hash,
           t.block_time_ms, t.exchange, t.exchange_version, t.order_hash, t.maker, t.taker,
           t.side, t.token_id, t.shares, t.collateral, t.price, t.fee, t.fee_asset,
           t.t_detect_ms, t.backfilled, t.retracted, t.audit, $3
    FROM alloc, ROWS FROM (jsonb_to_recordset($11::jsonb) AS (
             block_number bigint, log_index integer, block_hash text, version bigint,
             tx_hash text, block_time_ms bigint, exchange text, exchange_version smallint,
             order_hash text, maker text, taker text, side smallint, token_id text, shares text,
             collateral text, price text, fee text, fee_asset text, t_detect_ms bigint,
             backfilled smallint, retracted smallint, audit smallint))
         WITH ORDINALITY AS t (block_number, log_index, block_hash, version, tx_hash,
             block_time_ms, exchange, exchange_version, order_hash, maker, taker, side, token_id,
             shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled, retracted, audit, n)
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
       CASE WHEN $10::text <> '' THEN pg_notify($10::text, moved.block_number::text) END AS woke
FROM moved
