SELECT instance, beat_ms, (state->>'last_round_ms')::bigint FROM heartbeats
WHERE service = 'pmw-push' AND state->>'role' = 'leader' ORDER BY beat_ms DESC LIMIT 1
