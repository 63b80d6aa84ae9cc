-- Holder $1's upkeep: its open sessions' ($2) leases expire $3 ms from now again; leases of
-- sessions it no longer holds (a release that did not reach Postgres) are dropped.
WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
gone AS (DELETE FROM session_leases WHERE holder = $1 AND NOT (session_id = ANY ($2::bigint[])))
UPDATE session_leases SET expires_ms = (SELECT ms FROM now) + $3
WHERE holder = $1 AND session_id = ANY ($2::bigint[])
