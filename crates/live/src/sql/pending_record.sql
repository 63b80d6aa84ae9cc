-- Records one settlement seen pending: its transaction, one row per fill its calldata names
-- ($7, a JSON array in emit order) and a `pending` event per fill (the trigger of migration 0023
-- wakes `pmw_pending` at commit). A transaction recorded before (a restart's re-sighting) is
-- left as it is. $1 tx hash, $2 sender, $3 nonce, $4 target, $5 first seen (ms), $6 provider
-- name, $8 now (ms). Returns the events appended.
WITH tx AS (
    INSERT INTO pending_txs (tx_hash, sender, nonce, target, first_seen_ms, seen_by, seen_block)
    VALUES ($1, $2, $3, $4, $5, jsonb_build_object($6::text, $5::bigint),
            coalesce((SELECT block_number FROM ingest_cursor WHERE id = 1), 0))
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING tx_hash
), fills AS (
    INSERT INTO pending_fills (tx_hash, fill_index, order_hash, maker, taker, token_id, side,
                               making, taking, exchange)
    SELECT tx.tx_hash, f.fill_index, f.order_hash, f.maker, f.taker, f.token_id, f.side,
           f.making, f.taking, f.exchange
    FROM tx, jsonb_to_recordset($7::jsonb) AS f (fill_index integer, order_hash text,
         maker text, taker text, token_id text, side smallint, making text, taking text,
         exchange text)
    RETURNING id, fill_index
), events AS (
    INSERT INTO pending_events (fill_id, kind, created_ms)
    SELECT id, 'pending', $8 FROM fills ORDER BY fill_index
    RETURNING 1
)
SELECT count(*) FROM events
