-- Give back this epoch's claims on deliveries not attempted ($1 = ids, $2 = epoch).
UPDATE webhook_deliveries SET claimed_epoch = NULL, claimed_ms = NULL
WHERE id = ANY ($1) AND claimed_epoch = $2 AND state = 'pending'
