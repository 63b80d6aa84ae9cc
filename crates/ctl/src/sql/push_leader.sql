-- The push leader of slot 0 (its epoch row) with its heartbeat, if it has one.
SELECT e.slot, e.epoch, e.leader, e.acquired_ms, h.beat_ms, h.state, h.pid
FROM push_epoch e LEFT JOIN heartbeats h ON h.service = 'pmw-push' AND h.instance = e.leader
WHERE e.slot = 0
