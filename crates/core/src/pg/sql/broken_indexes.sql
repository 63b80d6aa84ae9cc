-- Indexes of pmw's schema (the session's current schema) that Postgres does not use or does not
-- maintain: indisvalid = false (a failed or unfinished CREATE INDEX CONCURRENTLY or REINDEX
-- CONCURRENTLY: the planner never uses it, a UNIQUE one enforces nothing) or indisready = false
-- (not even kept up to date by writes). Each with its table, flags and definition.
SELECT i.relname::text, t.relname::text, x.indisvalid, x.indisready, x.indisunique,
       pg_get_indexdef(x.indexrelid)
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema() AND (NOT x.indisvalid OR NOT x.indisready)
ORDER BY t.relname, i.relname
