-- Renew the lease of writer lock $1 at epoch $2, at $3 (ms); no row when deposed.
UPDATE writer_epochs SET renewed_ms = $3 WHERE lock_key = $1 AND epoch = $2
RETURNING epoch
