INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (service, instance)
DO UPDATE SET pid = EXCLUDED.pid, started_ms = EXCLUDED.started_ms,
              beat_ms = EXCLUDED.beat_ms, state = EXCLUDED.state
