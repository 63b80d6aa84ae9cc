DELETE FROM ws_tickets WHERE account_id = $1 AND (used_ms IS NOT NULL OR expires_ms <= $2)
