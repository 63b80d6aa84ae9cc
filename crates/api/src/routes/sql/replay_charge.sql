-- Charge account $1 one replay in the hour starting at $2 (ms), unless it already started $3
-- replays in that hour: a new hour starts the count again. No row: the quota is spent. The row
-- lock of ON CONFLICT serialises parallel charges of one account.
INSERT INTO replay_quota AS q (account_id, hour_ms, replays) VALUES ($1, $2, 1)
ON CONFLICT (account_id) DO UPDATE
SET hour_ms = EXCLUDED.hour_ms,
    replays = CASE WHEN q.hour_ms = EXCLUDED.hour_ms THEN q.replays + 1 ELSE 1 END
WHERE q.hour_ms <> EXCLUDED.hour_ms OR q.replays < $3
RETURNING replays
