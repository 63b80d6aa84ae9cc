-- One round's claim and cursor move, fenced by epoch in the same statement: the epoch row is
-- taken FOR SHARE, so a leader whose epoch was bumped writes nothing (0 rows returned).
WITH e AS (
    SELECT epoch FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE
), c AS (
    INSERT INTO ws_claims (slot, epoch, from_block, from_log, to_block, to_log, trades, state, claimed_ms)
    SELECT $1, $2, $3, $4, $5, $6, $7, 'claimed', $8 FROM e
    RETURNING id
)
UPDATE push_cursor
SET block_number = $5, log_index = $6, reorg_id = $9, epoch = $2, updated_ms = $8
FROM e, c
WHERE push_cursor.slot = $1
RETURNING c.id
