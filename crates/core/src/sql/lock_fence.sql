EXISTS (SELECT 1 FROM writer_epochs w JOIN pg_stat_activity a ON a.pid = w.pid
AND a.backend_start = w.backend_start JOIN pg_locks l ON l.pid = w.pid
WHERE w.lock_key = {key} AND w.epoch = {epoch} AND l.locktype = 'advisory'
AND l.classid = {classid} AND l.objid = {objid} AND l.objsubid = 1 AND l.granted
AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
