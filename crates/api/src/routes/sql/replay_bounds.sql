-- How far a replay may go: what push's webhook lane has queued, and what its finality lane has
-- (`final`s). Cursors as (block, log index) pairs; NULL where a lane has not started.
SELECT w.block_number, w.log_index, f.block_number, f.log_index
FROM webhook_cursor w LEFT JOIN final_cursor f ON f.slot = w.slot
WHERE w.slot = 0
