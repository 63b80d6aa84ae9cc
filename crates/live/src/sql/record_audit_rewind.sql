-- An audit correction, as a rewind for push (cause 'audit', not a chain reorg): its lanes go
-- back to $1 (the block below the lowest corrected one) and deliver the ledger after it again,
-- with the backfilled fills and the retractions. $2 = the ingest watermark then, $3 = the hash
-- of the lowest corrected block, $4 = depth ($2 − $1), $5 = now (ms).
INSERT INTO reorgs (ancestor, old_head, new_head_hash, depth, detected_ms, cause)
VALUES ($1, $2, $3, $4, $5, 'audit')
