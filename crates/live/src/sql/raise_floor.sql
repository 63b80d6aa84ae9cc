-- Raise the hot ledger's floor to $1 (readers take the blocks below it from ClickHouse from
-- now on), only forward and only while this writer holds the live lock ({fence}, pid $3).
-- $2 now (ms): partitions below the floor are dropped a grace period after it.
UPDATE stored_cursor SET floor_block = $1, floor_ms = $2, updated_ms = $2
WHERE id = 1 AND floor_block < $1 AND {fence}
RETURNING floor_block
