-- The instances of service $1 beating as `standby` (waiting on its writer lock), other than
-- the lock's holder $2: instance, pid, last beat (ms).
SELECT instance, pid, beat_ms FROM heartbeats
WHERE service = $1 AND state->>'role' = 'standby' AND instance IS DISTINCT FROM $2
ORDER BY instance
