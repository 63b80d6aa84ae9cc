-- Runs of failing samples per part (push, ingest, webhook): the run's first sample (its
-- *_down_since_ms), its last sample and how many samples it holds, for the runs whose last sample
-- lies in [from, to) and that last at least the threshold (last − first + one sample period).
-- Binds: from, to, threshold (ms), three times (push, ingest, webhook).
SELECT 'push' AS part, push_down_since_ms AS since_ms, max(t_ms) AS last_ms, count() AS samples
FROM availability_samples
WHERE push_ok = 0 AND t_ms >= ? AND t_ms < ?
GROUP BY since_ms
HAVING last_ms - since_ms + 1000 >= ?
UNION ALL
SELECT 'ingest' AS part, ingest_down_since_ms AS since_ms, max(t_ms) AS last_ms, count() AS samples
FROM availability_samples
WHERE ingest_ok = 0 AND t_ms >= ? AND t_ms < ?
GROUP BY since_ms
HAVING last_ms - since_ms + 1000 >= ?
UNION ALL
SELECT 'webhook' AS part, webhook_down_since_ms AS since_ms, max(t_ms) AS last_ms, count() AS samples
FROM availability_samples
WHERE webhook_ok = 0 AND t_ms >= ? AND t_ms < ?
GROUP BY since_ms
HAVING last_ms - since_ms + 1000 >= ?
