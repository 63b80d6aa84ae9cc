-- pmw:ledger_projection: how far ClickHouse is behind the hot ledger: the projector's
-- stored_cursor seq, the last seq allocated, the hot ledger's floor, the commit time of the
-- oldest row not yet projected (NULL: caught up) and when the projector last moved.
SELECT /* pmw:ledger_projection */ s.seq, h.seq, s.floor_block,
       (SELECT committed_ms FROM ledger WHERE seq > s.seq ORDER BY seq LIMIT 1),
       s.updated_ms
FROM stored_cursor s, ledger_head h WHERE s.id = 1 AND h.id = 1
