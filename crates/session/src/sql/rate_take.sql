-- Take one request of `scope` $1 and `key` $2 from a shared GCRA limit: one every $3 ms, $4 at
-- once. The upsert holds the row lock, so concurrent takers from any process are serialised
-- and the limit holds fleet-wide. Returns whether it was taken and, when not, the ms to wait.
WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
old AS (SELECT tat_ms FROM rate_limits WHERE scope = $1 AND key = $2),
took AS (
    INSERT INTO rate_limits AS r (scope, key, tat_ms)
    SELECT $1, $2, now.ms + $3 FROM now
    ON CONFLICT (scope, key) DO UPDATE
        SET tat_ms = greatest(r.tat_ms, (SELECT ms FROM now)) + $3
        WHERE greatest(r.tat_ms, (SELECT ms FROM now)) + $3 - $3 * $4 <= (SELECT ms FROM now)
    RETURNING tat_ms)
SELECT EXISTS (SELECT 1 FROM took),
       greatest(coalesce((SELECT tat_ms FROM old), 0) + $3 - $3 * $4 - (SELECT ms FROM now), 0)
