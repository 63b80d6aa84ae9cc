-- Idempotency keys of the API's POST operations (`Idempotency-Key` header), per account: the
-- request's fingerprint (SHA-256 of method, path and body) and, once the request finished, the
-- stored response (status, content type, body) that a retry with the same key and body gets
-- again. `status` is NULL while the first request is in flight. Rows expire at `expires_ms`;
-- the API deletes expired rows when it stores new ones (bounded batches by this index).
CREATE TABLE idempotency_keys (
    account_id   bigint NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key          text   NOT NULL,
    fingerprint  bytea  NOT NULL,
    status       smallint,
    content_type text,
    body         bytea,
    created_ms   bigint NOT NULL,
    expires_ms   bigint NOT NULL,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_ms);
