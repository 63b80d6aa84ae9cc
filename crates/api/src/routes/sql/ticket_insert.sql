INSERT INTO ws_tickets (ticket_hash, account_id, key_id, expires_ms) VALUES ($1, $2, $3, $4)
