-- Leases expired over a minute ago (a crashed holder's) and rate-limit rows at rest for a
-- minute (their next request would be admitted as if new): neither counts any more.
WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
leases AS (DELETE FROM session_leases WHERE expires_ms < (SELECT ms FROM now) - 60000)
DELETE FROM rate_limits WHERE tat_ms < (SELECT ms FROM now) - 60000
