SELECT block_number FROM finalized_cursor WHERE id = 1
