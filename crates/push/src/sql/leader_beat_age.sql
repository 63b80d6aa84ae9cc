SELECT $2::bigint - greatest(e.acquired_ms, coalesce(h.beat_ms, 0))
FROM push_epoch e LEFT JOIN heartbeats h ON h.service = 'pmw-push' AND h.instance = e.leader
WHERE e.slot = $1
