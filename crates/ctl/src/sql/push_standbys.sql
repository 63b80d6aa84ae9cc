-- The push instances waiting on slot 0's lock (standby heartbeats other than the leader's).
SELECT instance, pid, beat_ms, (state->>'waiting_since_ms')::bigint FROM heartbeats
WHERE service = 'pmw-push' AND state->>'role' = 'standby'
AND instance IS DISTINCT FROM (SELECT leader FROM push_epoch WHERE slot = 0)
ORDER BY instance
