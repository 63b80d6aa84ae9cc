-- The holder of writer lock $1 (pmw-live, pmw-stats): instance, epoch, when it took the lock
-- and last renewed its lease (ms); no row before the first holder.
SELECT holder, epoch, acquired_ms, renewed_ms FROM writer_epochs WHERE lock_key = $1
