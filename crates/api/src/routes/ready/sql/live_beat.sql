-- The freshest pmw-live heartbeat of a writer (one that holds the lock and ingests): instance,
-- beat time, watermark and the newest head it saw.
SELECT instance, beat_ms, (state->>'cursor')::bigint, (state->>'head')::bigint FROM heartbeats
WHERE service = 'pmw-live' AND state->>'state' = 'ingesting' ORDER BY beat_ms DESC LIMIT 1
