SELECT block_number, log_index, updated_ms FROM webhook_cursor WHERE slot = 0
