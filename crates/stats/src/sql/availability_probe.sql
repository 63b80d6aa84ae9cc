-- What the availability sampler reads once a second: the ingest watermark and when it moved,
-- the push cursor's block (slot 0, the WebSocket lane), the first block after it and at or below
-- the watermark that holds trades (a NULL trade_count counts as holding some) with its detect
-- time, and the freshest pmw-live writer heartbeat with the newest head it received; the same
-- for the webhook lane's cursor; and the facts that name an incident's cause: the push epoch,
-- the live writer's instance and how many RPC providers it does not count as healthy, and the
-- latest start of any pmw service instance but pmw-stats (a deploy or a restart).
WITH w AS (SELECT block_number, updated_ms FROM ingest_cursor WHERE id = 1),
p AS (SELECT block_number FROM push_cursor WHERE slot = 0),
owed AS (
    SELECT c.block_number, c.t_detect_ms FROM chain_blocks c, w, p
    WHERE c.block_number > p.block_number AND c.block_number <= w.block_number
      AND coalesce(c.trade_count, 1) > 0
    ORDER BY c.block_number LIMIT 1
),
wh AS (SELECT block_number FROM webhook_cursor WHERE slot = 0),
wh_owed AS (
    SELECT c.block_number, c.t_detect_ms FROM chain_blocks c, w, wh
    WHERE c.block_number > wh.block_number AND c.block_number <= w.block_number
      AND coalesce(c.trade_count, 1) > 0
    ORDER BY c.block_number LIMIT 1
),
live AS (
    SELECT beat_ms, (state->>'head')::bigint AS head, instance,
        (SELECT count(*) FROM jsonb_array_elements(
            CASE WHEN jsonb_typeof(state->'providers') = 'array' THEN state->'providers'
                 ELSE '[]'::jsonb END) e
         WHERE e->>'standing' IS DISTINCT FROM 'healthy') AS demoted
    FROM heartbeats
    WHERE service = 'pmw-live' AND state->>'state' = 'ingesting' ORDER BY beat_ms DESC LIMIT 1
),
started AS (
    SELECT started_ms, service FROM heartbeats WHERE service <> 'pmw-stats'
    ORDER BY started_ms DESC LIMIT 1
)
SELECT (SELECT block_number FROM w), (SELECT updated_ms FROM w), (SELECT block_number FROM p),
    (SELECT block_number FROM owed), (SELECT t_detect_ms FROM owed),
    (SELECT beat_ms FROM live), (SELECT head FROM live),
    (SELECT block_number FROM wh), (SELECT block_number FROM wh_owed),
    (SELECT t_detect_ms FROM wh_owed),
    (SELECT epoch FROM push_epoch WHERE slot = 0), (SELECT instance FROM live),
    (SELECT demoted FROM live), (SELECT started_ms FROM started), (SELECT service FROM started)
