-- The backend pids holding one advisory lock in the current database (one at most); the code
-- fills in the lock's two key halves.
SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = {classid}
AND objid = {objid} AND objsubid = 1 AND granted
AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
