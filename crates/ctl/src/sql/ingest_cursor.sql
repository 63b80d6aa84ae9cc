SELECT block_number, updated_ms FROM ingest_cursor WHERE id = 1
