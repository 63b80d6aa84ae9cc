UPDATE ws_claims SET state = 'delivered', done_ms = $3
WHERE id = $1 AND state = 'claimed'
  AND EXISTS (SELECT 1 FROM push_epoch WHERE slot = $4 AND epoch = $2 FOR SHARE)
