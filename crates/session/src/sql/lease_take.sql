-- A session lease for holder $1, session $2 of account $3, expiring $5 ms from now (Postgres's
-- clock), taken only while the account has fewer than $4 unexpired leases (no cap when $4 is
-- NULL). Run after lease_lock.sql in the same transaction, so its count sees every lease
-- committed before the lock was granted. One row returned: the lease is taken.
WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms)
INSERT INTO session_leases (holder, session_id, account_id, expires_ms)
SELECT $1, $2, $3, now.ms + $5 FROM now
WHERE $4::bigint IS NULL
   OR (SELECT count(*) FROM session_leases l
       WHERE l.account_id = $3 AND l.expires_ms > now.ms) < $4::bigint
RETURNING session_id
