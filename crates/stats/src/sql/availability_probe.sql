-- What the availability sampler reads once a second: the ingest watermark and when it moved,
-- the push cursor's block (slot 0, the WebSocket lane), the first block after it and at or below
-- the watermark that holds trades (a NULL trade_count counts as holding some) with its detect
-- time, and the freshest pmw-live writer heartbeat with the newest head it received.
WITH w AS (SELECT block_number, updated_ms FROM ingest_cursor WHERE id = 1),
p AS (SELECT block_number FROM push_cursor WHERE slot = 0),
owed AS (
    SELECT c.block_number, c.t_detect_ms FROM chain_blocks c, w, p
    WHERE c.block_number > p.block_number AND c.block_number <= w.block_number
      AND coalesce(c.trade_count, 1) > 0
    ORDER BY c.block_number LIMIT 1
),
live AS (
    SELECT beat_ms, (state->>'head')::bigint AS head FROM heartbeats
    WHERE service = 'pmw-live' AND state->>'state' = 'ingesting' ORDER BY beat_ms DESC LIMIT 1
)
SELECT (SELECT block_number FROM w), (SELECT updated_ms FROM w), (SELECT block_number FROM p),
    (SELECT block_number FROM owed), (SELECT t_detect_ms FROM owed),
    (SELECT beat_ms FROM live), (SELECT head FROM live)
