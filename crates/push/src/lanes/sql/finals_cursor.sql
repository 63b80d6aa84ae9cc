-- One finality-lane round's cursor move, fenced by epoch in the same statement (the epoch row
-- FOR SHARE): a leader whose epoch was bumped moves nothing (no row returned). The round's
-- `final` webhook deliveries are queued in the same transaction.
UPDATE final_cursor
SET block_number = $3, log_index = $4, reorg_id = $5, epoch = $2, updated_ms = $6
WHERE slot = $1 AND EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE)
RETURNING 1::bigint
