-- Unlisted emitters not (or no longer) in the exchange list, most recently seen first, at most
-- $1; the total count in every row.
SELECT address, first_block, last_block, events, audit_events, first_tx, first_seen_ms,
       last_seen_ms, count(*) OVER () AS total
FROM unlisted_emitters
WHERE listed_ms IS NULL
ORDER BY last_seen_ms DESC, address
LIMIT $1
