INSERT INTO reorgs (ancestor, old_head, new_head_hash, depth, detected_ms)
VALUES ($1, $2, $3, $4, $5)
