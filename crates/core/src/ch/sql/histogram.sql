-- The WS detect-to-push histogram of one window (live rows only); the code fills in the bin
-- list, one countIf per bin in bin order. Binds: from (ms), to (ms).
SELECT count() AS n, [{bins}] AS bins FROM (SELECT t_push_ms - t_detect_ms AS d
    FROM push_latency WHERE backfilled = 0 AND channel = 'ws'
    AND t_push_ms >= ? AND t_push_ms < ?)
