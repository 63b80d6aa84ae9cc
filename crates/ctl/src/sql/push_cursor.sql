SELECT block_number, log_index, epoch, updated_ms FROM push_cursor WHERE slot = 0
