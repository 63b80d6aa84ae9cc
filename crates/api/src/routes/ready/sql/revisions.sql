-- The build revision of every instance that beat since $1.
SELECT service, instance, coalesce(state->>'revision', 'unknown') FROM heartbeats
WHERE beat_ms >= $1 ORDER BY service, instance
