SELECT h.state FROM push_epoch e JOIN heartbeats h ON h.service = 'pmw-push' AND h.instance = e.leader
WHERE e.slot = 0 AND h.state->>'role' = 'leader'
