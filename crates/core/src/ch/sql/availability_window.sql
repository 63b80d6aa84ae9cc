-- Availability of one window from the per-second samples: seconds sampled, seconds push and
-- ingest were within their bounds (a second counts as available only when every sample in it
-- was), and the longest run of failing samples of each (clipped at the window's start; one
-- sample period added: a run of k samples a second apart lasts k seconds) with its start, and
-- the most each trailed (push: ms the oldest owed trade had waited; ingest: blocks), and the
-- first sampled second (ms; 0 without samples).
-- Binds: from (ms) four times, then from (ms), to (ms).
SELECT count() AS sampled, sum(p) AS push_ok_s, sum(i) AS ingest_ok_s,
    max(pg) AS push_gap_ms, argMax(pgs, pg) AS push_gap_from_ms,
    max(ig) AS ingest_gap_ms, argMax(igs, ig) AS ingest_gap_from_ms,
    max(pl) AS push_max_lag_ms, max(il) AS ingest_max_lag_blocks, min(sec) * 1000 AS first_ms
FROM (SELECT intDiv(t_ms, 1000) AS sec, min(push_ok) AS p, min(ingest_ok) AS i,
        max(push_lag_ms) AS pl, max(ingest_lag_blocks) AS il,
        max(if(push_ok = 0, t_ms - greatest(push_down_since_ms, ?) + 1000, 0)) AS pg,
        max(if(push_ok = 0, greatest(push_down_since_ms, ?), 0)) AS pgs,
        max(if(ingest_ok = 0, t_ms - greatest(ingest_down_since_ms, ?) + 1000, 0)) AS ig,
        max(if(ingest_ok = 0, greatest(ingest_down_since_ms, ?), 0)) AS igs
    FROM availability_samples
    WHERE t_ms >= ? AND t_ms < ?
    GROUP BY sec)
