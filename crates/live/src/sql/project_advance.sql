-- Move stored_cursor to seq $1 (every row up to it is in ClickHouse), only forward and only
-- while this writer holds the live lock ({fence}, pid $3). $2 now (ms). One row when it moved.
UPDATE stored_cursor SET seq = $1, updated_ms = $2
WHERE id = 1 AND seq <= $1 AND {fence}
RETURNING seq
