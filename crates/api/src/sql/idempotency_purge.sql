-- Delete at most $2 expired idempotency keys (any account), oldest first, skipping locked rows.
DELETE FROM idempotency_keys k
USING (
    SELECT account_id, key FROM idempotency_keys
    WHERE expires_ms <= $1
    ORDER BY expires_ms
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) d
WHERE k.account_id = d.account_id AND k.key = d.key
