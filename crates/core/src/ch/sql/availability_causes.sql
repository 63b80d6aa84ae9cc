-- What the samples of one incident (and the sample just before it) recorded about causes: whether
-- Postgres or ClickHouse ever failed, the push epochs and live instances seen (more than one: a
-- leader change), the most RPC providers demoted, and the latest start of any pmw service, with
-- the newest sample in range. Binds: from (ms), to (ms).
SELECT count() AS samples, min(pg_ok) AS pg_all_ok, min(ch_ok) AS ch_all_ok,
    minIf(push_epoch, push_epoch > 0) AS epoch_min, max(push_epoch) AS epoch_max,
    uniqExactIf(live_instance, live_instance != '') AS live_instances,
    max(providers_demoted) AS demoted_max,
    max(newest_start_ms) AS started_ms,
    argMax(newest_start_service, newest_start_ms) AS started_service
FROM availability_samples
WHERE t_ms >= ? AND t_ms < ?
