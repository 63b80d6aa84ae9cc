-- Whether the current database has the migrations table (1 or 0).
SELECT count() > 0 FROM system.tables WHERE database = currentDatabase() AND name = 'schema_migrations'
