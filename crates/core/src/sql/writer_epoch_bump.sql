-- Take the next epoch of writer lock $1 for holder $2 (this session: its pid and backend
-- start), at $3 (ms); returns the epoch. Run on the lock session right after the lock is won.
INSERT INTO writer_epochs AS w (lock_key, epoch, holder, pid, backend_start, acquired_ms, renewed_ms)
SELECT $1, 1, $2, pg_backend_pid(), a.backend_start, $3, $3
FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()
ON CONFLICT (lock_key) DO UPDATE
SET epoch = w.epoch + 1, holder = EXCLUDED.holder, pid = EXCLUDED.pid,
    backend_start = EXCLUDED.backend_start, acquired_ms = EXCLUDED.acquired_ms,
    renewed_ms = EXCLUDED.renewed_ms
RETURNING epoch
