-- The hot ledger's partitions (named ledger_p<first block, 12 digits>), lowest first, and
-- whether a detach is pending (an interrupted DETACH ... CONCURRENTLY).
SELECT c.relname, i.inhdetachpending
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'ledger'::regclass ORDER BY c.relname
