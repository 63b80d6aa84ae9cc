-- The standbys of a single-writer pair: instances of service '{service}' (filled in by the
-- code) beating as `standby`, other than the holder of writer lock $1; with their last beat.
SELECT h.instance, h.beat_ms FROM heartbeats h
WHERE h.service = '{service}' AND h.state->>'role' = 'standby'
AND h.instance IS DISTINCT FROM (SELECT holder FROM writer_epochs WHERE lock_key = $1)
ORDER BY h.instance
