SELECT h.instance, h.beat_ms FROM heartbeats h
WHERE h.service = 'pmw-push' AND h.state->>'role' = 'standby'
AND h.instance IS DISTINCT FROM (SELECT leader FROM push_epoch WHERE slot = 0)
ORDER BY h.instance
