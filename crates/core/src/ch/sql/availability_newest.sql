-- The newest availability sample's time (0: none) in [from, to): an incident whose run holds it
-- is still open. Binds: from (ms), to (ms).
SELECT max(t_ms) FROM availability_samples WHERE t_ms >= ? AND t_ms < ?
