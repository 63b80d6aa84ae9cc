EXISTS (SELECT 1 FROM writer_epochs w WHERE w.lock_key = {key} AND w.epoch = {epoch}
AND w.pid = pg_backend_pid())
