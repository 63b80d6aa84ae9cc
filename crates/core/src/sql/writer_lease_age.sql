-- How long ago (ms, against $2) the holder of writer lock $1 renewed its lease, and who it is;
-- no row before the first holder.
SELECT $2::bigint - renewed_ms, holder FROM writer_epochs WHERE lock_key = $1
