UPDATE ws_tickets t SET used_ms = $2 FROM api_keys k, accounts a
WHERE t.ticket_hash = $1 AND t.used_ms IS NULL AND t.expires_ms > $2
  AND k.id = t.key_id AND k.revoked_ms IS NULL
  AND a.id = t.account_id AND a.disabled_ms IS NULL
RETURNING t.account_id, t.key_id
