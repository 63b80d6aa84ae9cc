INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (slot) DO NOTHING
