-- Coverage of one window: the trades delivered live inside it (distinct ledger positions of
-- `ws`/`webhook` rows; a pending or void row has block 0) and how many of them confirmed a
-- pending fill (a row carries its pending_id). Binds: from (ms), to (ms).
SELECT count() AS n, countIf(confirms > 0) AS covered
FROM (SELECT block_number, log_index, max(pending_id) AS confirms
    FROM push_latency
    WHERE backfilled = 0 AND channel IN ('ws', 'webhook') AND block_number > 0
      AND t_push_ms >= ? AND t_push_ms < ?
    GROUP BY block_number, log_index)
