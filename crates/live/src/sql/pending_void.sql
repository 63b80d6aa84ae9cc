-- One end of a pending settlement that did not confirm: its transaction (if still open) and
-- every fill of it still open (or `unwound`: a reorg took its confirmation back, migration 0026)
-- get status $2 (`reverted`, `replaced`, `dropped`, `expired`), and each such fill a `void`
-- event with that reason. Guarded by status (`open` or `unwound`), so a fill ends
-- exactly once (a confirmation in a block commit racing this keeps its row: the loser's
-- re-check finds it no longer open). Judged on the ledger's branch: nothing ends unless
-- chain_blocks still holds the watermark $3 as $5, the block hash the facts were read against
-- (run after pending_lock.sql in the same transaction, so a reorg's unwind in flight is over).
-- $1 tx hash, $4 now (ms). Returns the fills voided.
WITH anchored AS (
    SELECT 1 FROM chain_blocks WHERE block_number = $3 AND block_hash = $5
), tx AS (
    UPDATE pending_txs SET status = $2, status_block = $3, status_ms = $4
    WHERE tx_hash = $1 AND status = 'open' AND EXISTS (SELECT 1 FROM anchored)
    RETURNING tx_hash
), fills AS (
    UPDATE pending_fills SET status = $2
    WHERE tx_hash = $1 AND status IN ('open', 'unwound') AND EXISTS (SELECT 1 FROM anchored)
    RETURNING id
), events AS (
    INSERT INTO pending_events (fill_id, kind, reason, created_ms)
    SELECT id, 'void', $2, $4 FROM fills ORDER BY id
    RETURNING 1
)
SELECT count(*) FROM events
