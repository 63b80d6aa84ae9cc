-- Where the projector stands: its stored_cursor (seq, floor, when the floor last rose), the last
-- seq allocated, and the commit time of the oldest row not yet projected (NULL: none).
SELECT s.seq, s.floor_block, s.floor_ms, h.seq,
       (SELECT committed_ms FROM ledger WHERE seq > s.seq ORDER BY seq LIMIT 1)
FROM stored_cursor s, ledger_head h WHERE s.id = 1 AND h.id = 1
