-- Claim an idempotency key: a new key, an expired one, or one whose first request has been in
-- flight since before $6 (its process died) is (re)claimed for this request; otherwise nothing.
INSERT INTO idempotency_keys (account_id, key, fingerprint, created_ms, expires_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (account_id, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, status = NULL, content_type = NULL, body = NULL,
        created_ms = EXCLUDED.created_ms, expires_ms = EXCLUDED.expires_ms
    WHERE idempotency_keys.expires_ms <= $4
       OR (idempotency_keys.status IS NULL AND idempotency_keys.created_ms <= $6)
RETURNING created_ms
