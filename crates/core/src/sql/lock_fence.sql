EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {classid}
AND objid = {objid} AND objsubid = 1 AND granted AND pid = {pid}
AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
