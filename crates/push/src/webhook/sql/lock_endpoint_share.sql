-- Hold endpoint $1 while its run of failures starts: a concurrent delete waits for this
-- transaction (the insert into webhook_failing needs the row). No row: it is gone.
SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR KEY SHARE
