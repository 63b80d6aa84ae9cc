-- The freshest pmw-stats heartbeat: instance and beat time.
SELECT instance, beat_ms FROM heartbeats WHERE service = 'pmw-stats' ORDER BY beat_ms DESC LIMIT 1
