-- Availability per UTC day from the per-second samples: per day (number since the epoch),
-- seconds sampled, seconds push and ingest were within their bounds (a second counts only when
-- every sample in it was) and the longest run of failing samples of each, clipped at the day's
-- start (one sample period added, as in availability_window.sql), with its start.
-- Binds: from (ms), to (ms).
SELECT intDiv(sec, 86400) AS day, count() AS sampled, sum(p) AS push_ok_s, sum(i) AS ingest_ok_s,
    max(pg) AS push_gap_ms, argMax(pgs, pg) AS push_gap_from_ms,
    max(ig) AS ingest_gap_ms, argMax(igs, ig) AS ingest_gap_from_ms
FROM (SELECT intDiv(t_ms, 1000) AS sec, min(push_ok) AS p, min(ingest_ok) AS i,
        max(if(push_ok = 0, t_ms - greatest(push_down_since_ms, intDiv(t_ms, 86400000) * 86400000) + 1000, 0)) AS pg,
        max(if(push_ok = 0, greatest(push_down_since_ms, intDiv(t_ms, 86400000) * 86400000), 0)) AS pgs,
        max(if(ingest_ok = 0, t_ms - greatest(ingest_down_since_ms, intDiv(t_ms, 86400000) * 86400000) + 1000, 0)) AS ig,
        max(if(ingest_ok = 0, greatest(ingest_down_since_ms, intDiv(t_ms, 86400000) * 86400000), 0)) AS igs
    FROM availability_samples
    WHERE t_ms >= ? AND t_ms < ?
    GROUP BY sec)
GROUP BY day
ORDER BY day
