-- The applied ClickHouse migrations (a version may be recorded twice by an interrupted run).
SELECT version, any(checksum) FROM schema_migrations GROUP BY version ORDER BY version
